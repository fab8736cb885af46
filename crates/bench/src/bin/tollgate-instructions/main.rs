//! `tollgate-instructions`: instructions per check of the client side,
//! counted by callgrind (the same count run after run, however busy the
//! machine is).
//!
//! - `tollgate-instructions run SCENARIO N` runs one scenario N times.
//! - `tollgate-instructions measure [N]` runs every scenario under
//!   `valgrind --tool=callgrind` at 0 and N iterations (default 2,000) and
//!   prints the instructions per iteration: `(Ir(N) - Ir(0)) / N`.
//!
//! `cargo run --release -p tollgate-bench --bin tollgate-instructions --
//! measure` (needs valgrind).

mod scenario;

use std::process::{Command, ExitCode};

use scenario::Scenario;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["run", name, n] => match (Scenario::parse(name), n.parse::<u64>()) {
            (Some(scenario), Ok(n)) => {
                scenario.run(n);
                ExitCode::SUCCESS
            }
            _ => usage(),
        },
        ["measure"] => measure(2_000),
        ["measure", n] => match n.parse() {
            Ok(n) => measure(n),
            Err(_) => usage(),
        },
        _ => usage(),
    }
}

fn usage() -> ExitCode {
    let names: Vec<String> = Scenario::all().iter().map(Scenario::name).collect();
    eprintln!(
        "usage: tollgate-instructions run SCENARIO N | measure [N]\nscenarios: {}",
        names.join(" ")
    );
    ExitCode::FAILURE
}

fn measure(n: u64) -> ExitCode {
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("tollgate-instructions: cannot find its own executable");
        return ExitCode::FAILURE;
    };
    println!("| scenario | instructions per check |\n|---|---|");
    for scenario in Scenario::all() {
        let counts = [0, n].map(|iterations| instructions(&exe, &scenario.name(), iterations));
        match counts {
            [Ok(base), Ok(total)] => {
                let per = total.saturating_sub(base) / n.max(1);
                println!("| {} | {per} |", scenario.name());
            }
            [Err(err), _] | [_, Err(err)] => {
                eprintln!("tollgate-instructions: {err}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// The total instructions (`Ir`) of one run under callgrind.
fn instructions(exe: &std::path::Path, scenario: &str, n: u64) -> Result<u64, String> {
    let dir = std::env::temp_dir().join(format!("tollgate-callgrind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let out = dir.join(format!("{scenario}-{n}.out"));
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(exe)
        .args(["run", scenario, &n.to_string()])
        .output()
        .map_err(|e| format!("cannot run valgrind (apt-get install valgrind): {e}"))?;
    if !status.status.success() {
        return Err(format!(
            "valgrind failed on {scenario}: {}",
            String::from_utf8_lossy(&status.stderr)
        ));
    }
    let text =
        std::fs::read_to_string(&out).map_err(|e| format!("cannot read {}: {e}", out.display()))?;
    let _ = std::fs::remove_file(&out);
    text.lines()
        .find_map(|line| {
            line.strip_prefix("summary: ")
                .or_else(|| line.strip_prefix("totals: "))
        })
        .and_then(|n| n.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no instruction total in the callgrind output of {scenario}"))
}
