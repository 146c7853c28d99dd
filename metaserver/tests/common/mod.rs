//! What the metaserver's tests share.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use ninf_proto::v1;

/// The interfaces of the standard `linpack` module, as a server registers them.
pub fn linpack() -> Vec<v1::FunctionInterface> {
    let text = include_str!("../../../routines/idl/linpack.idl");
    let module = ninf_idl::compile(&ninf_idl::SourceFile::new("linpack.idl", text)).unwrap();
    module
        .functions
        .iter()
        .map(v1::FunctionInterface::from)
        .collect()
}

/// A server at `address` registering the `linpack` module with these routines.
pub fn registration(address: &str, functions: Vec<v1::FunctionInterface>) -> v1::RegisterRequest {
    v1::RegisterRequest {
        address: address.into(),
        info: Some(v1::ServerInfo {
            mflops: 1000.0,
            processors: 1,
            cpus: 1,
            ..Default::default()
        }),
        modules: vec![v1::ModuleInterface {
            name: "linpack".into(),
            functions,
            ..Default::default()
        }],
        failed_modules: Vec::new(),
    }
}

/// A graph of one product of n = 50 from proxy `test`.
pub fn one_product() -> v1::ScheduleRequest {
    v1::ScheduleRequest {
        graph: Some(v1::TaskGraph {
            tasks: vec![v1::GraphTask {
                label: "mmul#0".into(),
                function: "mmul".into(),
                scalars: std::collections::HashMap::from([("n".to_string(), 50)]),
                client_out_bytes: 20_000,
                data: Vec::new(),
            }],
            edges: Vec::new(),
        }),
        proxy: "test".into(),
        ..Default::default()
    }
}
