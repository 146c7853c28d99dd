//! The checker: turns a parsed file into interface descriptors, or explains every reason it
//! cannot (duplicate names, expressions over the wrong parameters, OUT scalars, `Calls`
//! arguments that do not match the parameters, unknown languages and backends).

use std::collections::HashMap;

use crate::ast::{Clause, Define, ElementType, Expr, IdlFile, Item, Mode, Param};
use crate::diagnostic::{Diagnostic, SourceFile, Span};
use crate::interface::{
    Callee, FunctionInterface, Language, ModuleInterface, Parallelism, Parameter,
};

/// Backends a parallel routine may name.
pub const BACKENDS: [&str; 1] = ["MPI"];

/// Checks a parsed file. `default_module` names the module when the file has no `Module`.
pub fn check_file(
    file: &IdlFile,
    source: &SourceFile,
    default_module: &str,
) -> (ModuleInterface, Vec<Diagnostic>) {
    let mut diagnostics = Vec::new();
    let mut module: Option<(String, Span)> = None;
    let mut libraries = Vec::new();
    let mut required = Vec::new();
    let mut defines = Vec::new();
    for item in &file.items {
        match item {
            Item::Module(name) => {
                if let Some((_, first)) = &module {
                    let (line, _) = source.line_col(first.start);
                    diagnostics.push(Diagnostic::new(
                        name.span,
                        format!("a second `Module` declaration (the module is already named at line {line})"),
                    ));
                } else {
                    module = Some((name.name.clone(), name.span));
                }
            }
            Item::Library(s) => libraries.push(s.value.clone()),
            Item::Required(s) => required.push(s.value.clone()),
            Item::Define(d) => defines.push(d),
        }
    }
    let module_name = module.map_or_else(|| default_module.to_string(), |(n, _)| n);
    let mut functions = Vec::new();
    let mut seen: HashMap<&str, Span> = HashMap::new();
    for define in defines {
        if let Some(first) = seen.get(define.name.name.as_str()) {
            let (line, _) = source.line_col(first.start);
            diagnostics.push(Diagnostic::new(
                define.name.span,
                format!(
                    "duplicate function `{}` (first defined at line {line})",
                    define.name.name
                ),
            ));
            continue;
        }
        seen.insert(&define.name.name, define.name.span);
        match check_define(define, &module_name) {
            Ok(f) => functions.push(f),
            Err(mut errors) => diagnostics.append(&mut errors),
        }
    }
    diagnostics.sort_by_key(|d| d.span.start);
    (
        ModuleInterface {
            module: module_name,
            libraries,
            required,
            functions,
        },
        diagnostics,
    )
}

/// What an expression is for, which decides the names and literals it may use.
#[derive(Clone, Copy)]
enum ExprUse<'a> {
    Dimension(&'a str),
    CalcOrder,
    Parallel,
}

impl ExprUse<'_> {
    fn describe(self) -> String {
        match self {
            ExprUse::Dimension(param) => format!("dimension of `{param}`"),
            ExprUse::CalcOrder => "`CalcOrder`".to_string(),
            ExprUse::Parallel => "`Parallel`".to_string(),
        }
    }
}

/// Checks one definition on its own; used for files and for descriptors from the network.
pub fn check_define(define: &Define, module: &str) -> Result<FunctionInterface, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let mut by_name: HashMap<&str, &Param> = HashMap::new();
    for param in &define.params {
        if by_name.contains_key(param.name.name.as_str()) {
            errors.push(Diagnostic::new(
                param.name.span,
                format!(
                    "duplicate parameter `{}` in `{}`",
                    param.name.name, define.name.name
                ),
            ));
            continue;
        }
        by_name.insert(&param.name.name, param);
    }
    for param in &define.params {
        check_param(param, &by_name, &mut errors);
    }

    let mut calc_order = None;
    let mut processors = None;
    let mut backend: Option<(String, Span)> = None;
    let mut threads: Option<Span> = None;
    let mut required = Vec::new();
    let mut seen_clauses: HashMap<&str, ()> = HashMap::new();
    for clause in &define.clauses {
        let span = match clause {
            Clause::Required(s) | Clause::Backend(s) => s.span,
            Clause::CalcOrder(e) | Clause::Parallel(e) => e.span,
            Clause::Threads(span) => *span,
        };
        if !matches!(clause, Clause::Required(_))
            && seen_clauses.insert(clause.keyword(), ()).is_some()
        {
            errors.push(Diagnostic::new(
                span,
                format!(
                    "duplicate `{}` clause in `{}`",
                    clause.keyword(),
                    define.name.name
                ),
            ));
            continue;
        }
        match clause {
            Clause::Required(s) => required.push(s.value.clone()),
            Clause::Backend(s) => {
                if BACKENDS.contains(&s.value.as_str()) {
                    backend = Some((s.value.clone(), s.span));
                } else {
                    errors.push(Diagnostic::new(
                        s.span,
                        format!(
                            "unknown backend \"{}\" (supported: \"{}\")",
                            s.value,
                            BACKENDS.join("\", \"")
                        ),
                    ));
                }
            }
            Clause::CalcOrder(e) => {
                check_expr(e, ExprUse::CalcOrder, &by_name, &mut errors);
                calc_order = Some(e.clone());
            }
            Clause::Parallel(e) => {
                check_expr(e, ExprUse::Parallel, &by_name, &mut errors);
                processors = Some(e.clone());
            }
            Clause::Threads(span) => threads = Some(*span),
        }
    }
    let parallelism = parallelism(define, processors, backend, threads, &mut errors);

    let callee = check_calls(define, &by_name, &mut errors);

    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(FunctionInterface {
        name: define.name.name.clone(),
        module: module.to_string(),
        description: define.description.as_ref().map(|d| d.value.clone()),
        parameters: define
            .params
            .iter()
            .map(|p| Parameter {
                name: p.name.name.clone(),
                mode: p.mode,
                element_type: p.element_type,
                dimensions: p.dims.clone(),
            })
            .collect(),
        calc_order,
        parallelism,
        required,
        callee: callee.ok_or_else(Vec::new)?,
    })
}

/// How a definition runs, from its `Parallel`, `Backend` and `Threads` clauses; a
/// combination that makes no sense is reported and taken as sequential.
fn parallelism(
    define: &Define,
    processors: Option<Expr>,
    backend: Option<(String, Span)>,
    threads: Option<Span>,
    errors: &mut Vec<Diagnostic>,
) -> Parallelism {
    match (processors, backend) {
        (Some(_), _) if threads.is_some() => {
            if let Some(span) = threads {
                errors.push(Diagnostic::new(
                    span,
                    format!(
                        "`{}` has both `Parallel` (SPMD processes) and `Threads` (one process's threads): choose one",
                        define.name.name
                    ),
                ));
            }
            Parallelism::Sequential
        }
        (None, None) if threads.is_some() => Parallelism::Threads,
        (Some(processors), backend) => Parallelism::Parallel {
            processors,
            backend: backend.map(|(b, _)| b),
        },
        (None, Some((b, span))) => {
            errors.push(Diagnostic::new(
                span,
                format!(
                    "`Backend \"{b}\"` needs a `Parallel` clause saying over how many processors `{}` runs",
                    define.name.name
                ),
            ));
            Parallelism::Sequential
        }
        (None, None) => Parallelism::Sequential,
    }
}

fn check_param(param: &Param, by_name: &HashMap<&str, &Param>, errors: &mut Vec<Diagnostic>) {
    let name = &param.name.name;
    let textual = matches!(
        param.element_type,
        ElementType::String | ElementType::Filename
    );
    if textual {
        if param.mode != Mode::In {
            errors.push(Diagnostic::new(
                param.span,
                format!(
                    "{} parameter `{name}` must be IN ({} arguments are only sent to the routine)",
                    param.element_type.keyword(),
                    param.element_type.keyword()
                ),
            ));
        }
        if !param.dims.is_empty() {
            errors.push(Diagnostic::new(
                param.span,
                format!(
                    "`{name}` is an array of {}; only scalar {} parameters are supported",
                    param.element_type.keyword(),
                    param.element_type.keyword()
                ),
            ));
        }
        return;
    }
    if param.dims.is_empty() && param.mode != Mode::In {
        let t = param.element_type.keyword();
        errors.push(Diagnostic::new(
            param.span,
            format!(
                "{} scalar `{name}` is not allowed: Ninf passes scalars only to the routine; \
                 declare a one-element array such as `{} {t} {name}[1]`",
                param.mode.keyword(),
                param.mode.keyword()
            ),
        ));
    }
    for dim in &param.dims {
        check_expr(dim, ExprUse::Dimension(name), by_name, errors);
    }
}

fn check_expr(
    expr: &Expr,
    usage: ExprUse<'_>,
    by_name: &HashMap<&str, &Param>,
    errors: &mut Vec<Diagnostic>,
) {
    let what = usage.describe();
    if !matches!(usage, ExprUse::CalcOrder)
        && let Some(float) = expr.first_float()
    {
        errors.push(Diagnostic::new(
            float.span,
            format!("{what} must be an integer expression, but `{float}` is a real number"),
        ));
    }
    for (name, span) in expr.names() {
        let Some(param) = by_name.get(name) else {
            errors.push(Diagnostic::new(
                span,
                format!("unknown name `{name}` in {what}"),
            ));
            continue;
        };
        let problem = if param.mode != Mode::In {
            Some(format!("an {} parameter", param.mode.keyword()))
        } else if !param.dims.is_empty() {
            Some("an array".to_string())
        } else if !param.element_type.is_integer() {
            Some(format!("a {} parameter", param.element_type.keyword()))
        } else {
            None
        };
        if let Some(problem) = problem {
            errors.push(Diagnostic::new(
                span,
                format!(
                    "{what} uses `{name}`, which is {problem}; expressions may use only IN scalar integer parameters"
                ),
            ));
        }
    }
}

fn check_calls(
    define: &Define,
    by_name: &HashMap<&str, &Param>,
    errors: &mut Vec<Diagnostic>,
) -> Option<Callee> {
    let calls = &define.calls;
    let language = if calls.language.value.eq_ignore_ascii_case("C") {
        Some(Language::C)
    } else if calls.language.value.eq_ignore_ascii_case("Rust") {
        Some(Language::Rust)
    } else if calls.language.value.eq_ignore_ascii_case("Fortran") {
        Some(Language::Fortran)
    } else {
        errors.push(Diagnostic::new(
            calls.language.span,
            format!(
                "unknown language \"{}\" in `Calls` (supported: \"C\", \"Fortran\", \"Rust\")",
                calls.language.value
            ),
        ));
        None
    };
    if matches!(language, Some(Language::C | Language::Fortran)) && calls.path.len() > 1 {
        let span = calls.path[0].span.to(calls.path[calls.path.len() - 1].span);
        errors.push(Diagnostic::new(
            span,
            format!(
                "a {} routine is named by one identifier, not a `::` path",
                calls.language.value
            ),
        ));
    }
    if language == Some(Language::Fortran) {
        for arg in &calls.args {
            if let Some(p) = by_name.get(arg.name.as_str())
                && matches!(p.element_type, ElementType::String | ElementType::Filename)
            {
                errors.push(Diagnostic::new(
                    arg.span,
                    format!(
                        "`{}` is a {}: strings cannot be passed to a Fortran routine",
                        arg.name,
                        p.element_type.keyword()
                    ),
                ));
            }
        }
    }
    let mut used: HashMap<&str, Span> = HashMap::new();
    let mut unknown = false;
    for arg in &calls.args {
        if !by_name.contains_key(arg.name.as_str()) {
            unknown = true;
            let hint = crate::parser::suggest(&arg.name, by_name.keys().copied())
                .map_or(String::new(), |s| format!("; did you mean `{s}`?"));
            errors.push(Diagnostic::new(
                arg.span,
                format!(
                    "`Calls` argument `{}` is not a parameter of `{}`{hint}",
                    arg.name, define.name.name
                ),
            ));
        } else if used.insert(&arg.name, arg.span).is_some() {
            errors.push(Diagnostic::new(
                arg.span,
                format!("`Calls` passes parameter `{}` twice", arg.name),
            ));
        }
    }
    let missing: Vec<String> = define
        .params
        .iter()
        .filter(|p| !used.contains_key(p.name.name.as_str()))
        .map(|p| format!("`{}`", p.name.name))
        .collect();
    // An unknown name is usually a misspelled parameter: reporting it also as missing is noise.
    if !missing.is_empty() && !unknown && by_name.len() == define.params.len() {
        errors.push(Diagnostic::new(
            calls.span,
            format!(
                "`Calls` passes {} argument(s) but `{}` has {} parameter(s): missing {}",
                calls.args.len(),
                define.name.name,
                define.params.len(),
                missing.join(", ")
            ),
        ));
    }
    Some(Callee {
        language: language?,
        path: calls
            .path
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join("::"),
        arguments: calls.args.iter().map(|a| a.name.clone()).collect(),
    })
}
