//! Every scenario of `tollgate-instructions` runs (without callgrind: CI
//! counts nothing, it only proves the measured code still works).

#[path = "../src/bin/tollgate-instructions/scenario.rs"]
mod scenario;

use scenario::Scenario;

#[test]
fn every_scenario_runs_and_is_named_uniquely() {
    let all = Scenario::all();
    assert_eq!(all.len(), 12);
    for scenario in &all {
        assert_eq!(Scenario::parse(&scenario.name()), Some(*scenario));
        scenario.run(20);
    }
}
