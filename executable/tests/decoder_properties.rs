//! The executable's request decoder over many generated requests, as its fuzz target
//! (`executable/fuzz`) drives it but bounded, so that CI runs it on every change: arbitrary
//! bytes, and well-formed requests with arguments of every kind and size for the example
//! routines, decode to arguments or to an error naming the problem, never a panic or an
//! allocation past the limit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use ninf_idl::ModuleInterface;
use ninf_proto::v1;
use proptest::prelude::*;
use prost::Message;

/// The limit the tests decode under: 1 MiB of arrays.
const LIMIT: u64 = 1 << 20;

fn modules() -> &'static [ModuleInterface] {
    static MODULES: OnceLock<Vec<ModuleInterface>> = OnceLock::new();
    MODULES.get_or_init(|| {
        [
            include_str!("../../routines/idl/linpack.idl"),
            include_str!("../../routines/idl/vector.idl"),
        ]
        .iter()
        .map(|text| {
            ninf_idl::compile(&ninf_idl::SourceFile::new("t.idl", text.to_string())).unwrap()
        })
        .collect()
    })
}

fn function_names() -> Vec<String> {
    modules()
        .iter()
        .flat_map(|m| m.functions.iter().map(|f| f.name.clone()))
        .collect()
}

fn argument() -> impl Strategy<Value = v1::ArgumentValue> {
    use v1::argument_value::Value;
    prop_oneof![
        (-5i64..400).prop_map(Value::IntValue),
        any::<i64>().prop_map(Value::IntValue),
        any::<f64>().prop_map(Value::FloatValue),
        "\\PC{0,8}".prop_map(Value::StringValue),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(|b| Value::FileContent(b.into())),
        (0i32..8, prop::collection::vec(any::<u8>(), 0..4096)).prop_map(|(element_type, data)| {
            Value::Array(v1::Array {
                element_type,
                data: data.into(),
            })
        }),
    ]
    .prop_map(|value| v1::ArgumentValue { value: Some(value) })
}

fn decode(request: v1::ExecRequest) {
    let Some(function) = modules().iter().find_map(|m| m.function(&request.function)) else {
        return;
    };
    if let Err(e) = ninf_executable::runtime::decode_arguments(
        function,
        request.arguments,
        LIMIT,
        &Default::default(),
    ) {
        assert!(!e.to_string().is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(request) = v1::ExecRequest::decode(data.as_slice()) {
            decode(request);
        }
    }

    #[test]
    fn requests_of_any_arguments_decode_or_name_the_problem(
        function in prop::sample::select(function_names()),
        arguments in prop::collection::vec(argument(), 0..7),
    ) {
        let request = v1::ExecRequest { function, arguments, ..Default::default() };
        // Through the wire and back, as an executable reads it.
        let bytes = request.encode_to_vec();
        decode(v1::ExecRequest::decode(bytes.as_slice()).unwrap());
    }
}
