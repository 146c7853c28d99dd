//! Fuzzes the whole IDL front end: lexing, parsing, checking and rendering diagnostics must
//! never panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let source = ninf_idl::SourceFile::new("fuzz.idl", text.into_owned());
    match ninf_idl::compile(&source) {
        Ok(module) => {
            // A module that compiles must print to IDL that compiles to the same module.
            let again = ninf_idl::compile(&ninf_idl::SourceFile::new("again.idl", module.to_idl()));
            assert_eq!(again.ok().as_ref(), Some(&module));
            let _ = ninf_idl::codegen::rust::generate(&module);
        }
        Err(diagnostics) => {
            let _ = diagnostics.to_string();
        }
    }
});
