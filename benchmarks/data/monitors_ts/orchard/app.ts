import { FruitTree, Rootstock, spacingFor } from "./lib/trees";
import { CRATE_KILOS, PickingLedger } from "./lib/ledger";

export function season(): string {
  const ledger = new PickingLedger("2026-autumn");
  const spacing = spacingFor(Rootstock.Dwarfing, 12);
  const first = new FruitTree("north-1", Rootstock.SemiVigorous, 2019);
  const second = new FruitTree("north-2", Rootstock.Dwarfing);
  first.recordHarvest(42, true);
  second.recordHarvest(35);
  const cut = first.pruneCanopy(0.2, false);
  ledger.enrolTree(first);
  ledger.enrolTree(second);
  const plan = ledger.cratesNeeded(CRATE_KILOS, 0.1, true);
  const best = ledger.heaviestRow();
  const density = second.yieldPerMetre(spacing);
  return `${ledger.seasonTag} ${plan.crates} ${plan.spareKilos} ${best} ${cut} ${density} ${first.harvestedKilos}`;
}
