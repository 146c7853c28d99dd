//! Interface descriptors to and from protobuf. Decoding rebuilds the definition's syntax tree
//! and runs the IDL checker on it, so a descriptor from the network is held to the same rules
//! as an IDL file: a malformed one is rejected with the checker's reasons, never trusted.

use ninf_idl::ast::{self, Clause, Define, Ident, StringLit};
use ninf_idl::parser::{is_identifier, parse_expression};
use ninf_idl::{
    ElementType, FunctionInterface, Language, Mode, ModuleInterface, Parallelism, Span,
};

use crate::v1;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid descriptor of `{function}`: {message}")]
pub struct DescriptorError {
    pub function: String,
    pub message: String,
}

pub fn mode_to_proto(mode: Mode) -> v1::Mode {
    match mode {
        Mode::In => v1::Mode::In,
        Mode::Out => v1::Mode::Out,
        Mode::InOut => v1::Mode::Inout,
        Mode::Work => v1::Mode::Work,
    }
}

pub fn mode_from_proto(mode: v1::Mode) -> Option<Mode> {
    match mode {
        v1::Mode::Unspecified => None,
        v1::Mode::In => Some(Mode::In),
        v1::Mode::Out => Some(Mode::Out),
        v1::Mode::Inout => Some(Mode::InOut),
        v1::Mode::Work => Some(Mode::Work),
    }
}

pub fn element_type_to_proto(t: ElementType) -> v1::ElementType {
    match t {
        ElementType::Char => v1::ElementType::Char,
        ElementType::Short => v1::ElementType::Short,
        ElementType::Int => v1::ElementType::Int,
        ElementType::Long => v1::ElementType::Long,
        ElementType::Float => v1::ElementType::Float,
        ElementType::Double => v1::ElementType::Double,
        ElementType::Scomplex => v1::ElementType::Scomplex,
        ElementType::Dcomplex => v1::ElementType::Dcomplex,
        ElementType::String => v1::ElementType::String,
        ElementType::Filename => v1::ElementType::Filename,
    }
}

pub fn element_type_from_proto(t: v1::ElementType) -> Option<ElementType> {
    ElementType::ALL
        .into_iter()
        .find(|&e| element_type_to_proto(e) == t)
}

impl From<&FunctionInterface> for v1::FunctionInterface {
    fn from(f: &FunctionInterface) -> Self {
        let (parallelism, backend) = match &f.parallelism {
            Parallelism::Sequential | Parallelism::Threads => (String::new(), String::new()),
            Parallelism::Parallel {
                processors,
                backend,
            } => (processors.to_string(), backend.clone().unwrap_or_default()),
        };
        v1::FunctionInterface {
            name: f.name.clone(),
            module: f.module.clone(),
            description: f.description.clone().unwrap_or_default(),
            parameters: f
                .parameters
                .iter()
                .map(|p| v1::Parameter {
                    name: p.name.clone(),
                    mode: mode_to_proto(p.mode).into(),
                    element_type: element_type_to_proto(p.element_type).into(),
                    dimensions: p.dimensions.iter().map(ToString::to_string).collect(),
                })
                .collect(),
            calc_order: f
                .calc_order
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            parallelism,
            backend,
            required: f.required.clone(),
            threads: f.parallelism == Parallelism::Threads,
            callee: Some(v1::Callee {
                language: match f.callee.language {
                    Language::C => v1::Language::C,
                    Language::Rust => v1::Language::Rust,
                    Language::Fortran => v1::Language::Fortran,
                }
                .into(),
                path: f.callee.path.clone(),
                arguments: f.callee.arguments.clone(),
            }),
        }
    }
}

impl From<&ModuleInterface> for v1::ModuleInterface {
    fn from(m: &ModuleInterface) -> Self {
        v1::ModuleInterface {
            name: m.module.clone(),
            libraries: m.libraries.clone(),
            required: m.required.clone(),
            functions: m.functions.iter().map(Into::into).collect(),
        }
    }
}

fn ident(name: &str, what: &str, function: &str) -> Result<Ident, DescriptorError> {
    if is_identifier(name) {
        Ok(Ident {
            name: name.to_string(),
            span: Span::default(),
        })
    } else {
        Err(DescriptorError {
            function: function.to_string(),
            message: format!("{what} {name:?} is not an identifier"),
        })
    }
}

fn string(value: &str) -> StringLit {
    StringLit {
        value: value.to_string(),
        span: Span::default(),
    }
}

fn expression(text: &str, what: &str, function: &str) -> Result<ast::Expr, DescriptorError> {
    parse_expression(text).map_err(|diagnostics| DescriptorError {
        function: function.to_string(),
        message: format!(
            "{what} `{text}` does not parse: {}",
            diagnostics
                .iter()
                .map(|d| d.message.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ),
    })
}

impl TryFrom<&v1::FunctionInterface> for FunctionInterface {
    type Error = DescriptorError;

    fn try_from(f: &v1::FunctionInterface) -> Result<Self, DescriptorError> {
        let name = &f.name;
        let fail = |message: String| DescriptorError {
            function: name.clone(),
            message,
        };
        let mut params = Vec::with_capacity(f.parameters.len());
        for p in &f.parameters {
            let mode = v1::Mode::try_from(p.mode)
                .ok()
                .and_then(mode_from_proto)
                .ok_or_else(|| fail(format!("parameter `{}` has no valid mode", p.name)))?;
            let element_type = v1::ElementType::try_from(p.element_type)
                .ok()
                .and_then(element_type_from_proto)
                .ok_or_else(|| fail(format!("parameter `{}` has no valid type", p.name)))?;
            let dims = p
                .dimensions
                .iter()
                .map(|d| expression(d, &format!("dimension of `{}`", p.name), name))
                .collect::<Result<_, _>>()?;
            params.push(ast::Param {
                mode,
                element_type,
                name: ident(&p.name, "parameter name", name)?,
                dims,
                span: Span::default(),
            });
        }
        let mut clauses = Vec::new();
        for r in &f.required {
            clauses.push(Clause::Required(string(r)));
        }
        if !f.backend.is_empty() {
            clauses.push(Clause::Backend(string(&f.backend)));
        }
        if !f.calc_order.is_empty() {
            clauses.push(Clause::CalcOrder(expression(
                &f.calc_order,
                "CalcOrder",
                name,
            )?));
        }
        if !f.parallelism.is_empty() {
            clauses.push(Clause::Parallel(expression(
                &f.parallelism,
                "Parallel",
                name,
            )?));
        }
        if f.threads {
            clauses.push(Clause::Threads(Span::default()));
        }
        let callee = f
            .callee
            .as_ref()
            .ok_or_else(|| fail("no callee".to_string()))?;
        let language = match v1::Language::try_from(callee.language) {
            Ok(v1::Language::C) => "C",
            Ok(v1::Language::Rust) => "Rust",
            Ok(v1::Language::Fortran) => "Fortran",
            _ => return Err(fail("callee has no valid language".to_string())),
        };
        let path = callee
            .path
            .split("::")
            .map(|segment| ident(segment, "callee path segment", name))
            .collect::<Result<_, _>>()?;
        let args = callee
            .arguments
            .iter()
            .map(|a| ident(a, "callee argument", name))
            .collect::<Result<_, _>>()?;
        let define = Define {
            name: ident(name, "function name", name)?,
            params,
            description: (!f.description.is_empty()).then(|| string(&f.description)),
            clauses,
            calls: ast::Calls {
                language: string(language),
                path,
                args,
                span: Span::default(),
            },
            span: Span::default(),
        };
        if !is_identifier(&f.module) {
            return Err(fail(format!(
                "module name {:?} is not an identifier",
                f.module
            )));
        }
        ninf_idl::check::check_define(&define, &f.module).map_err(|errors| {
            fail(
                errors
                    .iter()
                    .map(|d| d.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })
    }
}
