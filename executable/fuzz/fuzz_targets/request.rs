//! Fuzzes the executable's request decoder: any bytes an executable reads as a request must
//! decode to an error or to arguments that match the routine's interface, never a panic or
//! an allocation the limits forbid.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ninf_idl::ModuleInterface;
use prost::Message;

fn modules() -> &'static [ModuleInterface] {
    static MODULES: OnceLock<Vec<ModuleInterface>> = OnceLock::new();
    MODULES.get_or_init(|| {
        [
            include_str!("../../../routines/idl/linpack.idl"),
            include_str!("../../../routines/idl/vector.idl"),
        ]
        .iter()
        .map(|text| {
            ninf_idl::compile(&ninf_idl::SourceFile::new("fuzz.idl", text.to_string()))
                .expect("the example IDL compiles")
        })
        .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(request) = ninf_proto::v1::ExecRequest::decode(data) else {
        return;
    };
    let Some(function) = modules().iter().find_map(|m| m.function(&request.function)) else {
        return;
    };
    // 1 MiB of arrays at most, so a request cannot make the fuzzer allocate gigabytes.
    let _ = ninf_executable::runtime::decode_arguments(function, request.arguments, 1 << 20);
});
