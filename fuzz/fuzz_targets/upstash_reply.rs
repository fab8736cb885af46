#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tollgate_fuzz_targets::upstash_reply(data));
