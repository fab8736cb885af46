//! A short, deterministic run of every fuzz target, for CI: the committed
//! seeds, then pseudo-random inputs and mutated seeds from a fixed seed.
//! The real fuzzing is `cargo fuzz` (see the README); this keeps the targets
//! building, running and their properties holding on every change.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

/// Inputs per target beyond the seeds.
const INPUTS: usize = 25_000;

/// Pieces of the grammars the parsers read, for the text targets.
const TOKENS: &[&str] = &[
    "0",
    "1",
    "9",
    "00",
    "255",
    "256",
    "65535",
    "a",
    "f",
    "A",
    "F",
    "ffff",
    "FFFF",
    ":",
    "::",
    ".",
    "/",
    "/0",
    "/8",
    "/32",
    "/64",
    "/96",
    "/128",
    "/129",
    "%",
    "%3A",
    "%25",
    " ",
    "\t",
    ",",
    "s",
    "m",
    "h",
    "d",
    "w",
    "[",
    "]",
    "=",
    "\"",
    "'",
    "\n",
    "#",
    "[a]",
    "max",
    "window",
    "=1",
    "\"1d\"",
    "86400",
    "9223372036854775807",
    "-1",
    "1.5",
    "é",
    "１",
    "\u{0}",
    "-",
    "_",
    "x",
];

/// xorshift64*, so every run sees the same inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The committed seeds of `target`, from `fuzz/seeds/<target>/`.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut paths: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

/// One input: random bytes, a string of grammar tokens, or a mutated seed.
fn input(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    match rng.below(if seeds.is_empty() { 2 } else { 4 }) {
        0 => (0..rng.below(96)).map(|_| rng.next() as u8).collect(),
        1 => (0..rng.below(12))
            .flat_map(|_| TOKENS[rng.below(TOKENS.len())].bytes())
            .collect(),
        _ => {
            let mut bytes = seeds[rng.below(seeds.len())].clone();
            for _ in 0..=rng.below(4) {
                mutate(rng, &mut bytes);
            }
            bytes
        }
    }
}

fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    let at = rng.below(bytes.len() + 1);
    match rng.below(5) {
        0 if at < bytes.len() => bytes[at] = rng.next() as u8,
        1 if at < bytes.len() => {
            bytes.remove(at);
        }
        2 => {
            let token = TOKENS[rng.below(TOKENS.len())].bytes();
            bytes.splice(at..at, token);
        }
        3 if at < bytes.len() => {
            let end = (at + 1 + rng.below(8)).min(bytes.len());
            let chunk = bytes[at..end].to_vec();
            bytes.splice(at..at, chunk);
        }
        _ => bytes.insert(at, rng.next() as u8),
    }
}

/// Runs `target` on the seeds and [`INPUTS`] more inputs; fails with the
/// first input that panics, written out for a reproducer.
fn drive(name: &str, target: fn(&[u8]), seed: u64) {
    let seeds = seeds(name);
    let mut rng = Rng(seed);
    let inputs = seeds
        .clone()
        .into_iter()
        .chain((0..INPUTS).map(|_| input(&mut rng, &seeds)));
    for (count, data) in inputs.enumerate() {
        if catch_unwind(AssertUnwindSafe(|| target(&data))).is_err() {
            panic!(
                "target {name} failed on input {count}: {data:?} ({:?})",
                String::from_utf8_lossy(&data)
            );
        }
    }
}

#[test]
fn visitor_holds_its_properties_on_smoke_inputs() {
    drive("visitor", tollgate_fuzz_targets::visitor, 0x5eed_0001);
}

#[test]
fn visitor_source_holds_its_properties_on_smoke_inputs() {
    drive(
        "visitor_source",
        tollgate_fuzz_targets::visitor_source,
        0x5eed_0002,
    );
}

#[test]
fn network_holds_its_properties_on_smoke_inputs() {
    drive("network", tollgate_fuzz_targets::network, 0x5eed_0003);
}

#[test]
fn rules_hold_their_properties_on_smoke_inputs() {
    drive("rules", tollgate_fuzz_targets::rules, 0x5eed_0004);
}

#[test]
fn window_holds_its_properties_on_smoke_inputs() {
    drive("window", tollgate_fuzz_targets::window, 0x5eed_0005);
}

#[test]
fn key_parts_stay_injective_on_smoke_inputs() {
    drive("key_parts", tollgate_fuzz_targets::key_parts, 0x5eed_0006);
}

#[test]
fn proxy_requests_hold_their_properties_on_smoke_inputs() {
    drive(
        "proxy_request",
        tollgate_fuzz_targets::proxy_request,
        0x5eed_0007,
    );
}

#[test]
fn webhook_signatures_hold_their_properties_on_smoke_inputs() {
    drive(
        "webhook_signature",
        tollgate_fuzz_targets::webhook_signature,
        0x5eed_0008,
    );
}

#[test]
fn upstash_replies_hold_their_properties_on_smoke_inputs() {
    drive(
        "upstash_reply",
        tollgate_fuzz_targets::upstash_reply,
        0x5eed_0009,
    );
}
