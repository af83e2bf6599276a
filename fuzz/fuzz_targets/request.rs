#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tokentap::fuzzing::request(data));
