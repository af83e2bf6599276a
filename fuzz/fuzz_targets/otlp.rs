#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tokentap_core::fuzzing::otlp(data, std::time::Instant::now()));
