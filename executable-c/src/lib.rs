//! The executable runtime with a C ABI (`libninf_exec.a`, `include/ninf_exec.h`): the glue
//! `ninf-gen build` writes for a module of C or Fortran routines calls [`ninf_exec_main`]
//! with the module's IDL and a table of its routines. The runtime is the one every Rust
//! executable uses (`ninf_executable::serve_stdio`: strict decoding, size checks against the
//! IDL, error replies); this crate only lays each call's arguments out as C pointers and
//! puts the written arrays back.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::process::ExitCode;
use std::sync::OnceLock;

use ninf_executable::runtime::c_string;
use ninf_executable::{ArrayStorage, CallArgs, RoutineError};
use ninf_idl::{ElementType, FunctionInterface, ModuleInterface, SourceFile};
use ninf_proto::v1::ExecErrorKind;
use num_complex::{Complex32, Complex64};

/// `ninf_exec_routine_t`.
#[repr(C)]
pub struct Routine {
    name: *const c_char,
    call: extern "C" fn(args: *mut *mut c_void) -> i64,
}

/// The module being served: its checked interface and its routines by name.
struct Module {
    interface: ModuleInterface,
    routines: HashMap<String, extern "C" fn(*mut *mut c_void) -> i64>,
}

static MODULE: OnceLock<Module> = OnceLock::new();

/// Serves the module; see `ninf_exec.h`.
///
/// # Safety
/// The strings must be NUL-terminated; `routines` must point to `count` entries whose names
/// are NUL-terminated and whose functions take the arguments `ninf_exec.h` describes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ninf_exec_main(
    idl_name: *const c_char,
    idl_source: *const c_char,
    routines: *const Routine,
    count: usize,
) -> c_int {
    // SAFETY: the caller's contract.
    let text = |s: *const c_char| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
    let (name, source) = (text(idl_name), text(idl_source));
    let interface = match ninf_idl::compile(&SourceFile::new(&name, &source)) {
        Ok(interface) => interface,
        Err(diagnostics) => {
            eprintln!("{diagnostics}");
            return 1;
        }
    };
    let table = if count == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(routines, count) }
    };
    let routines = table.iter().map(|r| (text(r.name), r.call)).collect();
    if MODULE
        .set(Module {
            interface,
            routines,
        })
        .is_err()
    {
        eprintln!("ninf executable: ninf_exec_main called twice");
        return 1;
    }
    match ninf_executable::serve_stdio(&name, &source, dispatch) {
        code if code == ExitCode::SUCCESS => 0,
        _ => 1,
    }
}

/// Threads the call being served may compute with; see `ninf_exec.h`. 1 outside a call,
/// and for every call of a routine the IDL does not declare `Threads`.
#[unsafe(no_mangle)]
pub extern "C" fn ninf_exec_threads() -> c_int {
    c_int::try_from(ninf_executable::threads::count()).unwrap_or(c_int::MAX)
}

fn failed(message: String) -> RoutineError {
    RoutineError::new(ExecErrorKind::RoutineFailed, message)
}

/// One argument laid out for C: the storage a pointer in `args` points into.
enum Held {
    Array(ArrayStorage),
    Char(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Scomplex([f32; 2]),
    Dcomplex([f64; 2]),
    Text(CString),
}

impl Held {
    fn pointer(&mut self) -> *mut c_void {
        match self {
            // OUT and INOUT arrays are always writable; an IN array may be read-only memory.
            Held::Array(data) => data.pointer(false),
            Held::Char(v) => std::ptr::from_mut(v).cast(),
            Held::Short(v) => std::ptr::from_mut(v).cast(),
            Held::Int(v) => std::ptr::from_mut(v).cast(),
            Held::Long(v) => std::ptr::from_mut(v).cast(),
            Held::Float(v) => std::ptr::from_mut(v).cast(),
            Held::Double(v) => std::ptr::from_mut(v).cast(),
            Held::Scomplex(v) => v.as_mut_ptr().cast(),
            Held::Dcomplex(v) => v.as_mut_ptr().cast(),
            Held::Text(s) => s.as_ptr().cast_mut().cast(),
        }
    }
}

/// Parameter `index` of `f` laid out for C.
fn hold(f: &FunctionInterface, args: &mut CallArgs, index: usize) -> Result<Held, RoutineError> {
    let p = &f.parameters[index];
    if p.is_array() {
        return args.take_raw_array(index).map(Held::Array);
    }
    Ok(match p.element_type {
        ElementType::Char => Held::Char(args.scalar::<u8>(index)? as i8),
        ElementType::Short => Held::Short(args.scalar(index)?),
        ElementType::Int => Held::Int(args.scalar(index)?),
        ElementType::Long => Held::Long(args.scalar(index)?),
        ElementType::Float => Held::Float(args.scalar(index)?),
        ElementType::Double => Held::Double(args.scalar(index)?),
        ElementType::Scomplex => {
            let z: Complex32 = args.scalar(index)?;
            Held::Scomplex([z.re, z.im])
        }
        ElementType::Dcomplex => {
            let z: Complex64 = args.scalar(index)?;
            Held::Dcomplex([z.re, z.im])
        }
        ElementType::String => Held::Text(c_string(&args.take_text(index)?, &p.name)?),
        ElementType::Filename => Held::Text(c_string(&args.file(index)?, &p.name)?),
    })
}

/// The runtime's dispatcher: lays the arguments out, calls the C routine, puts OUT and
/// INOUT arrays back.
fn dispatch(name: &str, args: &mut CallArgs) -> Result<i64, RoutineError> {
    let module = MODULE
        .get()
        .ok_or_else(|| failed("the module is not loaded".into()))?;
    let f = module
        .interface
        .functions
        .iter()
        .find(|f| f.name == name)
        .ok_or_else(|| RoutineError::function_not_found(name))?;
    let call = module.routines.get(name).ok_or_else(|| {
        failed(format!(
            "`{name}` is declared in the IDL but not in the glue"
        ))
    })?;
    let mut held = (0..f.parameters.len())
        .map(|i| hold(f, args, i))
        .collect::<Result<Vec<Held>, RoutineError>>()?;
    let mut pointers: Vec<*mut c_void> = held.iter_mut().map(Held::pointer).collect();
    let status = call(pointers.as_mut_ptr());
    for (index, held) in held.into_iter().enumerate() {
        if let Held::Array(data) = held
            && f.parameters[index].mode.is_output()
        {
            args.put_raw_array(index, data);
        }
    }
    Ok(status)
}
