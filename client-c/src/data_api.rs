//! The exported GridRPC data-management functions (`grpc_data.h`, GFD.186): each checks what
//! C passed, runs the data module's logic, and answers with a code.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Once;

use crate::codes::{Failure, GrpcError};
use crate::data::transfer::{self, Source};
use crate::data::uri::{self, Location};
use crate::data::{self, CData, Data, END_LIST, Mode, Shared, bad};
use crate::ffi::{c_text, guard};
use crate::library::{self, runtime};

/// Longest URI, mode or dimension list read from C, so that a list missing its end is
/// refused instead of read without bound.
const MAX_LIST: usize = 1024;

/// [`guard`] for the functions that need `grpc_initialize` first.
fn initialized(body: impl FnOnce() -> Result<(), Failure>) -> GrpcError {
    guard(|| {
        library::grid()?;
        forget_with_the_grid();
        body()
    })
}

fn forget_with_the_grid() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        library::forget_at_finalize(|| {
            data::forget_all();
            transfer::forget_all();
        })
    });
}

/// A NULL-terminated list of C strings (none when `list` is NULL).
///
/// # Safety
/// `list` must be null or a NULL-terminated array of NUL-terminated strings.
unsafe fn strings(list: *const *const c_char, what: &str) -> Result<Vec<String>, Failure> {
    let mut read = Vec::new();
    if list.is_null() {
        return Ok(read);
    }
    for i in 0..MAX_LIST {
        // SAFETY: the caller's contract: entries up to the NULL are readable.
        let entry = unsafe { list.add(i).read() };
        if entry.is_null() {
            return Ok(read);
        }
        // SAFETY: as above.
        read.push(unsafe { c_text(entry, what) }?);
    }
    Err(bad(format!("{what}: no NULL within {MAX_LIST} entries")))
}

/// Reads entries of `list` until `end`.
///
/// # Safety
/// `list` must be null or an array ending with `end`.
unsafe fn until<T: Copy + PartialEq>(
    list: *const T,
    end: T,
    what: &str,
) -> Result<Vec<T>, Failure> {
    if list.is_null() {
        return Err(bad(format!("{what} is NULL")));
    }
    let mut read = Vec::new();
    for i in 0..MAX_LIST {
        // SAFETY: the caller's contract.
        let entry = unsafe { list.add(i).read() };
        if entry == end {
            return Ok(read);
        }
        read.push(entry);
    }
    Err(bad(format!(
        "{what}: no end marker within {MAX_LIST} entries"
    )))
}

fn parsed(uris: Vec<String>) -> Result<Vec<(String, Location)>, Failure> {
    uris.into_iter()
        .map(|u| uri::parse(&u).map(|l| (u, l)).map_err(bad))
        .collect()
}

/// Output URIs with their modes, each mode fitting its location.
///
/// # Safety
/// As [`strings`] and [`until`].
unsafe fn outputs(
    uris: *const *const c_char,
    modes: *const c_int,
    function: &str,
) -> Result<Vec<(String, Location, Mode)>, Failure> {
    // SAFETY: the caller's contract.
    let uris = parsed(unsafe { strings(uris, "an output URI") }?)?;
    let modes: Vec<c_int> = if modes.is_null() && uris.is_empty() {
        Vec::new()
    } else {
        // SAFETY: the caller's contract.
        unsafe { until(modes, END_LIST, "the list of data modes") }?
    };
    if modes.len() != uris.len() {
        return Err(bad(format!(
            "{function}: {} output URIs but {} modes (one each, then GRPC_END_LIST)",
            uris.len(),
            modes.len()
        )));
    }
    let mut read = Vec::with_capacity(uris.len());
    for ((text, location), mode) in uris.into_iter().zip(modes) {
        let mode = Mode::from_c(mode)
            .ok_or_else(|| bad(format!("{function}: `{text}`: unknown data mode {mode}")))?;
        match (&location, mode) {
            (Location::Grid(Some(_)), _) => {
                return Err(bad(format!(
                    "{function}: `{text}`: an output kept on the grid is ninf://grid (the \
                     grid names it); ninf://grid/ID is an input"
                )));
            }
            (Location::Grid(None), Mode::Volatile | Mode::StrictlyVolatile) => {
                return Err(bad(format!(
                    "{function}: `{text}` keeps data on the grid, so its mode is GRPC_STICKY, \
                     GRPC_UNIQUE_STICKY or GRPC_PERSISTENT, not {}",
                    mode.name()
                )));
            }
            (Location::Memory(_) | Location::File(_), Mode::Kept(_)) => {
                return Err(bad(format!(
                    "{function}: `{text}` is on this client, where {} means nothing; give \
                     ninf://grid to keep the data on the grid",
                    mode.name()
                )));
            }
            _ => read.push((text, location, mode)),
        }
    }
    if read
        .iter()
        .filter(|(_, l, _)| matches!(l, Location::Grid(_)))
        .count()
        > 1
    {
        return Err(bad(format!(
            "{function}: ninf://grid is given more than once"
        )));
    }
    Ok(read)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_data_init(
    data: *mut CData,
    list_of_uri_input: *const *const c_char,
    list_of_uri_output: *const *const c_char,
    data_type: c_int,
    data_dimensions: *const usize,
    list_of_data_mode: *const c_int,
) -> GrpcError {
    initialized(|| {
        if data.is_null() {
            return Err(bad("grpc_data_init: the grpc_data_t is NULL"));
        }
        let element_type = data::element_type_of(data_type)?;
        // SAFETY: grpc_data.h's contract.
        let dims = unsafe { until(data_dimensions, 0, "the data's dimensions") }?;
        if dims.is_empty() {
            return Err(bad(
                "grpc_data_init: the dimensions list is empty (it ends with 0)",
            ));
        }
        // SAFETY: grpc_data.h's contract.
        let inputs = parsed(unsafe { strings(list_of_uri_input, "an input URI") }?)?;
        // SAFETY: grpc_data.h's contract.
        let outputs = unsafe { outputs(list_of_uri_output, list_of_data_mode, "grpc_data_init") }?;
        let mut described = Data {
            element_type,
            dims: dims.iter().map(|&d| d as u64).collect(),
            inputs,
            outputs,
            on_grid: None,
        };
        bind_inputs(&mut described)?;
        // SAFETY: checked non-null; grpc_data.h's contract.
        unsafe { data::install(data, described) };
        Ok(())
    })
}

/// Checks the inputs: mapped memory keys, and data on the grid, which the handle is bound to.
fn bind_inputs(d: &mut Data) -> Result<(), Failure> {
    for (text, location) in &d.inputs {
        match location {
            Location::Memory(key) => {
                data::mapped(key)?;
            }
            Location::File(_) => {}
            Location::Grid(None) => {
                return Err(bad(format!(
                    "grpc_data_init: `{text}` names no data; an input on the grid is \
                     ninf://grid/ID"
                )));
            }
            Location::Grid(Some(id)) => {
                let grid = library::grid()?;
                let found = runtime()?.block_on(grid.proxy.data_info(id)).map_err(|e| {
                    bad(format!(
                        "grpc_data_init: `{text}`: no data handle `{id}` of this client on the \
                         grid ({})",
                        e.message
                    ))
                })?;
                let on_grid = found.data;
                if on_grid.element_type() != d.element_type || on_grid.len() as u64 != d.elements()
                {
                    return Err(bad(format!(
                        "grpc_data_init: `{text}` holds {} elements of {}, not {} of {}",
                        on_grid.len(),
                        on_grid.element_type().keyword(),
                        d.elements(),
                        d.element_type.keyword()
                    )));
                }
                d.on_grid = Some(on_grid);
            }
        }
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_data_transfer(
    data: *mut CData,
    list_of_input_uri: *const *const c_char,
    list_of_output_uri: *const *const c_char,
    list_of_output_modes: *const c_int,
) -> GrpcError {
    initialized(|| {
        let shared = data::get(data)?;
        transfer::wait_for(&shared)?;
        // SAFETY: grpc_data.h's contract.
        let inputs = parsed(unsafe { strings(list_of_input_uri, "an input URI") }?)?;
        let outputs: Vec<(Location, Mode)> = if list_of_output_uri.is_null() {
            own_outputs(&shared)
        } else {
            // SAFETY: grpc_data.h's contract.
            unsafe {
                outputs(
                    list_of_output_uri,
                    list_of_output_modes,
                    "grpc_data_transfer",
                )
            }?
            .into_iter()
            .map(|(_, l, m)| (l, m))
            .collect()
        };
        let source = source(&shared, inputs.into_iter().next())?;
        transfer::start(shared, source, outputs)
    })
}

/// The data's own outputs, less the grid when it is already kept there.
fn own_outputs(shared: &Shared) -> Vec<(Location, Mode)> {
    let d = shared.lock().unwrap_or_else(|e| e.into_inner());
    d.outputs
        .iter()
        .filter(|(_, l, _)| !(matches!(l, Location::Grid(_)) && d.on_grid.is_some()))
        .map(|(_, l, m)| (l.clone(), *m))
        .collect()
}

/// Where a transfer reads: the given input, else the copy on the grid, else the data's
/// first input.
fn source(shared: &Shared, given: Option<(String, Location)>) -> Result<Source, Failure> {
    let d = shared.lock().unwrap_or_else(|e| e.into_inner());
    let grid_copy = || {
        d.on_grid.clone().map(Source::Grid).ok_or_else(|| {
            bad("grpc_data_transfer: the data is not kept on the grid yet, so it cannot be read there")
        })
    };
    match given {
        Some((_, Location::Grid(_))) => grid_copy(),
        Some((_, client)) => Ok(Source::Client(client)),
        None if d.on_grid.is_some() => grid_copy(),
        None => d
            .inputs
            .first()
            .map(|(_, l)| Source::Client(l.clone()))
            .ok_or_else(|| bad("grpc_data_transfer: the data has no input to transfer from")),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_data_wait(
    list_of_data: *const *const CData,
    mode: c_int,
    returned_data: *mut *mut CData,
) -> GrpcError {
    initialized(|| {
        if list_of_data.is_null() {
            return Err(bad("grpc_data_wait: the list of data is NULL"));
        }
        let mut pointers = Vec::new();
        for i in 0..MAX_LIST {
            // SAFETY: grpc_data.h's contract: a NULL-terminated list.
            let entry = unsafe { list_of_data.add(i).read() };
            if entry.is_null() {
                break;
            }
            pointers.push(entry);
        }
        let list: Vec<Shared> = pointers
            .iter()
            .map(|&p| data::get(p))
            .collect::<Result<_, _>>()?;
        let any = match mode {
            0 => false,
            1 => true,
            other => {
                return Err(bad(format!(
                    "grpc_data_wait: unknown completion mode {other}"
                )));
            }
        };
        if any && list.is_empty() {
            return Err(bad("grpc_data_wait: GRPC_WAIT_ANY of an empty list"));
        }
        let (index, outcome) = transfer::wait(&list, any);
        if let (Some(index), false) = (index, returned_data.is_null()) {
            // SAFETY: checked non-null; grpc_data.h's contract.
            unsafe { returned_data.write(pointers[index].cast_mut()) };
        }
        outcome
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_data_getinfo(
    data: *mut CData,
    info_tag: c_int,
    _server_name: *const c_char,
    info: *mut *mut c_char,
) -> GrpcError {
    initialized(|| {
        if info.is_null() {
            return Err(bad("grpc_data_getinfo: the place for the answer is NULL"));
        }
        let shared = data::get(data)?;
        let text = info_of(&shared, info_tag)?;
        let copy = std::ffi::CString::new(text).map_err(|_| bad("the answer holds a NUL"))?;
        // SAFETY: malloc of the string's length; the caller frees it with free().
        let out = unsafe { libc::strdup(copy.as_ptr()) };
        if out.is_null() {
            return Err(bad("grpc_data_getinfo: out of memory"));
        }
        // SAFETY: checked non-null.
        unsafe { info.write(out) };
        Ok(())
    })
}

fn info_of(shared: &Shared, tag: c_int) -> Result<String, Failure> {
    let d = shared.lock().unwrap_or_else(|e| e.into_inner());
    let lines = |uris: Vec<&String>| uris.into_iter().cloned().collect::<Vec<_>>().join("\n");
    Ok(match tag {
        0 => d
            .on_grid
            .as_ref()
            .map_or_else(String::new, |g| g.id().to_string()),
        1 => lines(d.inputs.iter().map(|(u, _)| u).collect()),
        2 => lines(d.outputs.iter().map(|(u, _, _)| u).collect()),
        3 => d.mode().name().to_string(),
        4 => data::type_name(d.element_type).to_string(),
        5 => d
            .dims
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" "),
        6 => match d.on_grid.clone() {
            Some(on_grid) => {
                drop(d);
                let grid = library::grid()?;
                runtime()?
                    .block_on(grid.proxy.data_info(on_grid.id()))?
                    .servers
                    .join("\n")
            }
            None => lines(d.inputs.iter().map(|(u, _)| u).collect()),
        },
        7 => {
            drop(d);
            transfer::status(shared).to_string()
        }
        other => return Err(bad(format!("grpc_data_getinfo: unknown info tag {other}"))),
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_data_unbind(data: *mut CData) -> GrpcError {
    initialized(|| {
        let shared = data::get(data)?;
        transfer::wait_for(&shared)?;
        // SAFETY: a live handle's grpc_data_t (checked above).
        unsafe { data::forget(data) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_data_free(
    data: *mut CData,
    uri_locations: *const *const c_char,
) -> GrpcError {
    initialized(|| {
        let shared = data::get(data)?;
        let _ = transfer::wait_for(&shared);
        let locations: Vec<Location> = if uri_locations.is_null() {
            vec![Location::Grid(None)]
        } else {
            // SAFETY: grpc_data.h's contract.
            parsed(unsafe { strings(uri_locations, "a location URI") }?)?
                .into_iter()
                .map(|(_, l)| l)
                .collect()
        };
        let on_grid = shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .on_grid
            .clone();
        for location in &locations {
            match (location, &on_grid) {
                (Location::Grid(_), Some(on_grid)) => {
                    let grid = library::grid()?;
                    runtime()?.block_on(grid.proxy.free(on_grid))?;
                }
                (Location::File(path), _) => std::fs::remove_file(path)
                    .map_err(|e| bad(format!("grpc_data_free: {}: {e}", path.display())))?,
                _ => {}
            }
        }
        // SAFETY: a live handle's grpc_data_t (checked above).
        unsafe { data::forget(data) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_data_memory_mapping_set(
    key: *const c_char,
    data: *mut c_void,
) -> GrpcError {
    guard(|| {
        // SAFETY: grpc_data.h's contract.
        let key = unsafe { c_text(key, "the memory key") }?;
        if data.is_null() {
            return Err(bad(format!(
                "grpc_data_memory_mapping_set: `{key}` maps to NULL"
            )));
        }
        data::map_memory(&key, data as usize);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_data_memory_mapping_get(
    key: *const c_char,
    data: *mut *mut c_void,
) -> GrpcError {
    guard(|| {
        // SAFETY: grpc_data.h's contract.
        let key = unsafe { c_text(key, "the memory key") }?;
        if data.is_null() {
            return Err(bad(
                "grpc_data_memory_mapping_get: the place for the pointer is NULL",
            ));
        }
        let address = data::mapped(&key)?;
        // SAFETY: checked non-null.
        unsafe { data.write(address as *mut c_void) };
        Ok(())
    })
}
