//! Interface descriptors through protobuf: what a server publishes decodes to the same
//! interface, and a malformed descriptor from the network is rejected with a reason.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use ninf_idl::{FunctionInterface, ModuleInterface};
use ninf_proto::v1;
use ninf_proto::values::{ArrayData, decode, encode};
use num_complex::Complex64;
use prost::Message;

fn example(name: &str) -> ModuleInterface {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../routines/idl")
        .join(name);
    ninf_idl::compile_file(&path).unwrap()
}

#[test]
fn every_example_function_survives_the_wire() {
    for module in [example("linpack.idl"), example("vector.idl")] {
        let wire = v1::ModuleInterface::from(&module);
        let bytes = wire.encode_to_vec();
        let decoded = v1::ModuleInterface::decode(bytes.as_slice()).unwrap();
        assert_eq!(decoded.functions.len(), module.functions.len());
        for (sent, received) in module.functions.iter().zip(&decoded.functions) {
            let back = FunctionInterface::try_from(received).unwrap();
            assert_eq!(&back, sent);
        }
    }
}

fn dgefa() -> v1::FunctionInterface {
    v1::FunctionInterface::from(example("linpack.idl").function("dgefa").unwrap())
}

#[track_caller]
fn rejected(f: v1::FunctionInterface, message: &str) {
    let error = FunctionInterface::try_from(&f).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("invalid descriptor of `{}`: {message}", f.name)
    );
}

#[test]
fn malformed_descriptors_are_rejected_with_the_checker_reasons() {
    let mut f = dgefa();
    f.parameters[0].dimensions[0] = "n +".into();
    rejected(
        f,
        "dimension of `a` `n +` does not parse: expected an expression, found end of file",
    );

    let mut f = dgefa();
    f.parameters[0].dimensions[1] = "m".into();
    rejected(f, "unknown name `m` in dimension of `a`");

    let mut f = dgefa();
    f.parameters[2].dimensions.clear();
    rejected(
        f,
        "OUT scalar `ipvt` is not allowed: Ninf passes scalars only to the routine; declare a one-element array such as `OUT int ipvt[1]`",
    );

    let mut f = dgefa();
    f.parameters[1].name = "n; Define evil(".into();
    rejected(f, "parameter name \"n; Define evil(\" is not an identifier");

    let mut f = dgefa();
    f.parameters[1].mode = 42;
    rejected(f, "parameter `n` has no valid mode");

    let mut f = dgefa();
    f.calc_order = "2 * n ^ 3 / 3 )".into();
    rejected(
        f,
        "CalcOrder `2 * n ^ 3 / 3 )` does not parse: unexpected `)` after the expression",
    );

    let mut f = dgefa();
    f.callee = None;
    rejected(f, "no callee");
}

#[test]
fn arrays_round_trip_through_little_endian_bytes() {
    let values = vec![1.5f64, -0.0, f64::MAX, f64::MIN_POSITIVE];
    let bytes = encode(&values);
    assert_eq!(bytes.len(), 32);
    assert_eq!(&bytes[..8], &1.5f64.to_le_bytes());
    assert_eq!(decode::<f64>(&bytes).unwrap(), values);

    let z = vec![Complex64::new(1.0, -2.0)];
    let array = ArrayData::Dcomplex(z.clone());
    let back = ArrayData::from_proto(&array.to_proto()).unwrap();
    assert_eq!(back, ArrayData::Dcomplex(z));

    let error = decode::<i32>(&[0u8; 7]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "7 bytes is not a whole number of int elements (4 bytes each)"
    );
}
