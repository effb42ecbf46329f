import { FruitTree } from "./trees";

export interface CratePlan { crates: number; spareKilos: number }

export class PickingLedger {
  private readonly trees: FruitTree[] = [];
  seasonTag: string;

  constructor(seasonTag: string) {
    this.seasonTag = seasonTag;
  }

  enrolTree(tree: FruitTree): number {
    return this.trees.push(tree);
  }

  cratesNeeded(kilosPerCrate: number, reserveShare: number, roundUp?: boolean): CratePlan {
    const total = this.trees.reduce((sum, t) => sum + t.harvestedKilos, 0) * (1 + reserveShare);
    const crates = roundUp ? Math.ceil(total / kilosPerCrate) : Math.floor(total / kilosPerCrate);
    return { crates, spareKilos: total - crates * kilosPerCrate };
  }

  heaviestRow(): string | undefined {
    return [...this.trees].sort((a, b) => b.harvestedKilos - a.harvestedKilos)[0]?.rowLabel;
  }
}

export const CRATE_KILOS = 18;
