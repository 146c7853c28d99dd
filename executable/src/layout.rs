//! Where a call's large outputs go, decided before its routine runs. Every OUT and INOUT
//! array's size is known from the IDL and the request, so the executable lays the reply out
//! in advance: the message first (its largest possible length), then each large output at a
//! 64-byte boundary. The routine then writes those outputs where the reply carries them, and
//! nothing is copied to encode it. An output the host asked for in its store region is
//! written there instead, where the host keeps it.

use bytes::Bytes;
use ninf_idl::{FunctionInterface, Mode};
use ninf_proto::descriptor::element_type_to_proto;
use ninf_proto::v1::{self, argument_value::Value};
use prost::Message;

use crate::arrays::RegionPlace;
use crate::lent::LentFile;
use crate::shared::{
    REGION_ARRAY_THRESHOLD, RegionWriter, StoreMapper, UNPLACED, in_own, place_region_arrays,
};

/// The outputs a host asks for in the files it lent for the request
/// (`ExecRequest.lent_outputs`), and those files.
#[derive(Clone, Copy, Default)]
pub struct LentOutputs<'a> {
    pub files: &'a [std::sync::Arc<LentFile>],
    pub wanted: &'a [v1::RegionArray],
}

/// The reply region's plan for one call, and the store region's places it uses.
#[derive(Debug, Default)]
pub struct OutputLayout {
    /// By parameter index: the place of a large output, if it has one.
    places: Vec<Option<RegionPlace>>,
    /// Bytes below the first place: the most the reply's message can take.
    message_room: usize,
}

impl OutputLayout {
    pub fn place(&self, index: usize) -> Option<RegionPlace> {
        self.places.get(index).copied().flatten()
    }

    /// Whether `reply` can be written below the places.
    pub fn fits(&self, reply: &v1::ExecReply) -> bool {
        self.places.iter().all(Option::is_none) || reply.encoded_len() <= self.message_room
    }

    /// Plans the reply of `function` called with `arguments`; `bindings` are its IN
    /// integers. Outputs whose size cannot be known or is over `max_array_bytes` get no
    /// place: checking the arguments reports them. An output the host asked for in its
    /// store region (`wanted`), at the size computed here, is placed there when `store` maps
    /// it; any other large output goes into the reply region.
    pub fn plan(
        function: &FunctionInterface,
        (arguments, bindings): (
            &[v1::ArgumentValue],
            &std::collections::BTreeMap<String, i64>,
        ),
        (call_id, max_array_bytes): (u64, u64),
        region: &mut RegionWriter,
        (store, wanted, in_place): (
            Option<&mut StoreMapper>,
            &[v1::RegionArray],
            &[v1::RegionArray],
        ),
        lent: LentOutputs<'_>,
    ) -> std::io::Result<OutputLayout> {
        let sizes = output_sizes(function, arguments, bindings, max_array_bytes);
        if sizes
            .iter()
            .all(|&(_, bytes)| bytes < REGION_ARRAY_THRESHOLD)
        {
            return Ok(OutputLayout::default());
        }
        let mut places = vec![None; function.parameters.len()];
        if let Some(store) = store {
            for (index, mut place) in store_places(function, &sizes, store, wanted) {
                place.holds_input = in_place.iter().any(|a| a.parameter as usize == index);
                places[index] = Some(place);
            }
        }
        for (index, place) in lent_places(function, &sizes, lent) {
            places[index].get_or_insert(place);
        }
        let mut skeleton = skeleton_reply(function, &sizes, call_id, &places);
        let message_room = skeleton.encoded_len();
        let Some(v1::exec_reply::Result::Success(success)) = skeleton.result.as_mut() else {
            return Ok(OutputLayout::default());
        };
        let end = place_region_arrays(message_room, &mut success.region_outputs);
        let start = region.reserve(end)?.as_mut_ptr();
        for array in success.region_outputs.iter().filter(|a| in_own(a)) {
            let index = array.parameter as usize;
            let offset = array.offset as usize;
            // The region holds `end` bytes, and every place ends at or before `end`.
            let Some(place_start) = std::ptr::NonNull::new(start.wrapping_add(offset)) else {
                continue;
            };
            places[index] = Some(RegionPlace {
                element_type: function.parameters[index].element_type,
                offset,
                in_store: false,
                lent: None,
                holds_input: false,
                start: place_start,
                bytes: array.bytes as usize,
            });
        }
        Ok(OutputLayout {
            places,
            message_room,
        })
    }
}

/// The outputs the host wants in its store region that `store` could place at the size the
/// call gives them: (parameter index, place). A request the executable cannot follow
/// (another size, a range outside the region) leaves that output in the reply.
fn store_places(
    function: &FunctionInterface,
    sizes: &[(usize, usize)],
    store: &mut StoreMapper,
    wanted: &[v1::RegionArray],
) -> Vec<(usize, RegionPlace)> {
    let mut placed = Vec::new();
    for &(index, bytes) in sizes {
        let Some(want) = wanted
            .iter()
            .find(|w| w.parameter as usize == index && w.bytes == bytes as u64)
        else {
            continue;
        };
        if bytes < REGION_ARRAY_THRESHOLD {
            continue;
        }
        let (Ok(offset), Ok(start)) = (
            usize::try_from(want.offset),
            store.output(want.offset, want.bytes),
        ) else {
            continue;
        };
        let place = RegionPlace {
            element_type: function.parameters[index].element_type,
            offset,
            in_store: true,
            lent: None,
            holds_input: false,
            start,
            bytes,
        };
        placed.push((index, place));
    }
    placed
}

/// The outputs the host wants in a lent file that the call gives the size it asked for:
/// (parameter index, place). Any other stays in the reply region.
fn lent_places(
    function: &FunctionInterface,
    sizes: &[(usize, usize)],
    lent: LentOutputs<'_>,
) -> Vec<(usize, RegionPlace)> {
    let mut placed = Vec::new();
    for &(index, bytes) in sizes {
        let Some(want) = lent
            .wanted
            .iter()
            .find(|w| w.parameter as usize == index && w.bytes == bytes as u64)
        else {
            continue;
        };
        let Some(file) = lent.files.get(want.lent as usize) else {
            continue;
        };
        let (Ok(offset), Ok(start)) = (
            usize::try_from(want.offset),
            file.output(want.offset, want.bytes),
        ) else {
            continue;
        };
        if bytes < REGION_ARRAY_THRESHOLD || !offset.is_multiple_of(crate::shared::REGION_ALIGN) {
            continue;
        }
        let place = RegionPlace {
            element_type: function.parameters[index].element_type,
            offset,
            in_store: false,
            lent: Some(want.lent),
            holds_input: false,
            start,
            bytes,
        };
        placed.push((index, place));
    }
    placed
}

/// (parameter index, bytes) of each OUT and INOUT array whose size is known and allowed.
fn output_sizes(
    function: &FunctionInterface,
    arguments: &[v1::ArgumentValue],
    bindings: &std::collections::BTreeMap<String, i64>,
    max_array_bytes: u64,
) -> Vec<(usize, usize)> {
    let mut sizes = Vec::new();
    for (index, parameter) in function.parameters.iter().enumerate() {
        if !parameter.is_array() || !parameter.mode.is_output() {
            continue;
        }
        let from_idl = || {
            function
                .byte_size(parameter, bindings)
                .ok()
                .filter(|&b| b <= max_array_bytes)
        };
        let bytes = match (parameter.mode, arguments.get(index).map(|a| &a.value)) {
            (Mode::Out, _) => from_idl(),
            (_, Some(Some(Value::Array(array)))) => Some(array.data.len() as u64),
            // An INOUT input left in its place in the store region.
            (_, Some(None)) => from_idl(),
            _ => None,
        };
        if let Some(bytes) = bytes.and_then(|b| usize::try_from(b).ok()) {
            sizes.push((index, bytes));
        }
    }
    sizes
}

/// The longest success reply the call can have: its small outputs inline at their sizes,
/// its large ones as region arrays, and a status of the longest encoding.
fn skeleton_reply(
    function: &FunctionInterface,
    sizes: &[(usize, usize)],
    call_id: u64,
    stored: &[Option<RegionPlace>],
) -> v1::ExecReply {
    let mut success = v1::ExecSuccess {
        status: i64::MIN,
        ..Default::default()
    };
    for &(index, bytes) in sizes {
        let element_type = element_type_to_proto(function.parameters[index].element_type).into();
        if let Some(Some(place)) = stored.get(index) {
            let region = match place.lent {
                Some(_) => v1::ArrayRegion::Lent,
                None => v1::ArrayRegion::Store,
            };
            success.region_outputs.push(v1::RegionArray {
                parameter: index as u32,
                element_type,
                offset: place.offset as u64,
                bytes: bytes as u64,
                region: region.into(),
                lent: place.lent.unwrap_or(0),
            });
        } else if bytes >= REGION_ARRAY_THRESHOLD {
            success.region_outputs.push(v1::RegionArray {
                parameter: index as u32,
                element_type,
                offset: UNPLACED,
                bytes: bytes as u64,
                region: v1::ArrayRegion::Own.into(),
                ..Default::default()
            });
        } else {
            success.outputs.push(v1::ExecOutput {
                parameter: index as u32,
                value: Some(v1::ArgumentValue {
                    value: Some(Value::Array(v1::Array {
                        element_type,
                        data: Bytes::from(vec![0u8; bytes]),
                    })),
                }),
            });
        }
    }
    v1::ExecReply {
        call_id,
        result: Some(v1::exec_reply::Result::Success(success)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::runtime::{CallArgs, Limits, RoutineError, handle};
    use crate::shared::{
        REGION_ALIGN, RegionReader, StoreMapper, memory_file, restore_reply_outputs,
    };

    const IDL: &str = r#"Module t;
Define f(IN long n, IN double x[n], OUT double y[n], INOUT double z[n], OUT double small[4])
    Calls "Rust" t::f(n, x, y, z, small);
"#;

    /// y = 2x, z += 1, small = [n, status...]; returns the most negative status, whose
    /// encoding is the longest.
    fn dispatch(_: &str, args: &mut CallArgs) -> Result<i64, RoutineError> {
        let x = args.take_array::<f64>(1)?;
        let mut y = args.take_array::<f64>(2)?;
        let mut z = args.take_array::<f64>(3)?;
        let mut small = args.take_array::<f64>(4)?;
        for ((y, z), x) in y.iter_mut().zip(z.iter_mut()).zip(x.iter()) {
            *y = 2.0 * x;
            *z += 1.0;
        }
        small[0] = x.len() as f64;
        args.put_array(2, y);
        args.put_array(3, z);
        args.put_array(4, small);
        Ok(i64::MIN)
    }

    fn doubles(values: impl Iterator<Item = f64>) -> v1::ArgumentValue {
        let data: Vec<u8> = values.flat_map(f64::to_le_bytes).collect();
        v1::ArgumentValue {
            value: Some(Value::Array(v1::Array {
                element_type: v1::ElementType::Double as i32,
                data: data.into(),
            })),
        }
    }

    /// f(n, x = 0, 1, 2 ..., y, z = 0, -1, -2 ..., small).
    fn f_arguments(n: usize) -> Vec<v1::ArgumentValue> {
        vec![
            v1::ArgumentValue {
                value: Some(Value::IntValue(n as i64)),
            },
            doubles((0..n).map(|i| i as f64)),
            v1::ArgumentValue::default(),
            doubles((0..n).map(|i| -(i as f64))),
            v1::ArgumentValue::default(),
        ]
    }

    #[test]
    fn large_outputs_are_written_in_place_after_the_message_and_come_back_exact() {
        let module = ninf_idl::compile(&ninf_idl::SourceFile::new("t.idl", IDL)).unwrap();
        let file = memory_file("replies").unwrap();
        let mut writer = RegionWriter::new(file.try_clone().unwrap());
        let mut reader = RegionReader::new(file);
        let n = 20_000usize; // 160,000 bytes per array: over the region-array threshold
        let request = v1::ExecRequest {
            call_id: u64::MAX,
            function: "f".into(),
            arguments: f_arguments(n),
            ..Default::default()
        };
        let mut reply = handle(
            &module,
            dispatch,
            request,
            &Limits::default(),
            (Some(&mut writer), None, &[]),
        );

        let Some(v1::exec_reply::Result::Success(success)) = &reply.result else {
            panic!("expected a success, got {reply:?}");
        };
        assert_eq!(success.status, i64::MIN);
        let placed: Vec<(u32, u64)> = success
            .region_outputs
            .iter()
            .map(|a| (a.parameter, a.offset))
            .collect();
        assert_eq!(placed.iter().map(|p| p.0).collect::<Vec<_>>(), vec![2, 3]);
        let message_len = reply.encoded_len() as u64;
        assert!(
            placed[0].1 >= message_len,
            "the message stays below the outputs"
        );
        assert!(
            placed[1].1 >= placed[0].1 + 8 * n as u64,
            "the outputs do not overlap"
        );
        assert!(placed.iter().all(|p| p.1 % REGION_ALIGN as u64 == 0));

        restore_reply_outputs(&mut reader, &mut reply, false).unwrap();
        let Some(v1::exec_reply::Result::Success(success)) = reply.result else {
            panic!("still a success");
        };
        let values = |index: usize| -> Vec<f64> {
            match &success.outputs[index].value {
                Some(v1::ArgumentValue {
                    value: Some(Value::Array(array)),
                }) => ninf_proto::values::decode(&array.data).unwrap(),
                other => panic!("output {index} is not an array: {other:?}"),
            }
        };
        let parameters: Vec<u32> = success.outputs.iter().map(|o| o.parameter).collect();
        assert_eq!(parameters, vec![2, 3, 4]);
        assert!(
            values(0)
                .iter()
                .enumerate()
                .all(|(i, &y)| y == 2.0 * i as f64)
        );
        assert!(
            values(1)
                .iter()
                .enumerate()
                .all(|(i, &z)| z == 1.0 - i as f64)
        );
        assert_eq!(values(2), vec![n as f64, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn outputs_asked_for_in_the_store_are_written_there_and_an_impossible_place_falls_back() {
        let module = ninf_idl::compile(&ninf_idl::SourceFile::new("t.idl", IDL)).unwrap();
        let replies = memory_file("replies").unwrap();
        let mut writer = RegionWriter::new(replies.try_clone().unwrap());
        let store_file = memory_file("store").unwrap();
        store_file.set_len(1 << 20).unwrap();
        let mut store = StoreMapper::new(store_file.try_clone().unwrap()).unwrap();
        let n = 20_000usize;
        let wanted = |parameter: u32, offset: u64| v1::RegionArray {
            parameter,
            element_type: v1::ElementType::Double as i32,
            offset,
            bytes: 8 * n as u64,
            region: v1::ArrayRegion::Store.into(),
            ..Default::default()
        };
        let request = v1::ExecRequest {
            call_id: 1,
            function: "f".into(),
            arguments: f_arguments(n),
            // y at page 1 of the store; z past its end, which the executable cannot map.
            store_outputs: vec![wanted(2, 4096), wanted(3, 1 << 20)],
            ..Default::default()
        };
        let reply = handle(
            &module,
            dispatch,
            request,
            &Limits::default(),
            (Some(&mut writer), Some(&mut store), &[]),
        );
        let Some(v1::exec_reply::Result::Success(success)) = &reply.result else {
            panic!("expected a success, got {reply:?}");
        };
        let placed: Vec<(u32, i32)> = success
            .region_outputs
            .iter()
            .map(|a| (a.parameter, a.region))
            .collect();
        let (own, in_store) = (v1::ArrayRegion::Own as i32, v1::ArrayRegion::Store as i32);
        assert_eq!(placed, vec![(2, in_store), (3, own)]);
        assert_eq!(success.region_outputs[0].offset, 4096);
        let y = store.input(4096, 8 * n as u64).unwrap();
        let y: Vec<f64> = ninf_proto::values::decode(&y).unwrap();
        assert!(y.iter().enumerate().all(|(i, &y)| y == 2.0 * i as f64));
    }

    #[test]
    fn an_inout_input_the_host_wrote_into_the_store_is_updated_where_it_lies() {
        let module = ninf_idl::compile(&ninf_idl::SourceFile::new("t.idl", IDL)).unwrap();
        let replies = memory_file("replies").unwrap();
        let mut writer = RegionWriter::new(replies);
        let store_file = memory_file("store").unwrap();
        store_file.set_len(1 << 20).unwrap();
        let n = 20_000usize;
        let z: Vec<f64> = (0..n).map(|i| i as f64 * 0.25).collect();
        let offset = 8192u64;
        {
            use std::os::unix::fs::FileExt;
            store_file
                .write_all_at(&ninf_proto::values::encode(&z), offset)
                .unwrap();
        }
        let mut store = StoreMapper::new(store_file).unwrap();
        let in_store = v1::RegionArray {
            parameter: 3,
            element_type: v1::ElementType::Double as i32,
            offset,
            bytes: 8 * n as u64,
            region: v1::ArrayRegion::Store.into(),
            ..Default::default()
        };
        let mut request = v1::ExecRequest {
            call_id: 1,
            function: "f".into(),
            arguments: vec![
                v1::ArgumentValue {
                    value: Some(Value::IntValue(n as i64)),
                },
                doubles((0..n).map(|i| i as f64)),
                v1::ArgumentValue::default(),
                v1::ArgumentValue::default(),
                v1::ArgumentValue::default(),
            ],
            region_arrays: vec![in_store],
            store_outputs: vec![in_store],
            ..Default::default()
        };
        let mut requests = RegionReader::new(memory_file("requests").unwrap());
        crate::shared::restore_request_arrays(&mut requests, Some(&mut store), &mut request)
            .unwrap();
        assert_eq!(request.region_arrays, vec![in_store], "left for the layout");
        assert!(
            request.arguments[3].value.is_none(),
            "not read out of its place"
        );
        let reply = handle(
            &module,
            dispatch,
            request,
            &Limits::default(),
            (Some(&mut writer), Some(&mut store), &[]),
        );
        let Some(v1::exec_reply::Result::Success(success)) = &reply.result else {
            panic!("expected a success, got {reply:?}");
        };
        let z_out = success
            .region_outputs
            .iter()
            .find(|a| a.parameter == 3)
            .unwrap();
        assert_eq!(z_out, &in_store, "z comes back where it went in");
        let updated: Vec<f64> =
            ninf_proto::values::decode(&store.input(offset, 8 * n as u64).unwrap()).unwrap();
        assert!(updated.iter().zip(&z).all(|(u, z)| *u == z + 1.0));
    }
}
