export enum Rootstock { Dwarfing, SemiVigorous, Seedling }

export class FruitTree {
  harvestedKilos = 0;
  constructor(public rowLabel: string, public stock: Rootstock, plantedYear?: number) {}

  pruneCanopy(shareCut: number, keepLeader: boolean): number {
    return shareCut * (keepLeader ? 0.5 : 1);
  }

  recordHarvest(kilos: number, graded?: boolean): void {
    this.harvestedKilos += graded ? kilos * 0.9 : kilos;
  }

  yieldPerMetre(spacingMetres: number): number {
    return this.harvestedKilos / spacingMetres;
  }
}

export function spacingFor(stock: Rootstock, slopeDegrees: number): number {
  return stock === Rootstock.Dwarfing ? 1.5 + slopeDegrees / 30 : 4;
}
