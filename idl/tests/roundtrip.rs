//! Property tests: printing any syntax tree and parsing the text gives the same tree, and the
//! compiler never panics, whatever it is fed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use ninf_idl::ast::{
    BinaryOp, Calls, Clause, Define, ElementType, Expr, ExprKind, Ident, IdlFile, Item, Mode,
    Param, StringLit,
};
use ninf_idl::{SourceFile, Span};
use proptest::prelude::*;

fn ident() -> impl Strategy<Value = Ident> {
    "[a-zA-Z_][a-zA-Z0-9_]{0,7}".prop_map(|name| Ident {
        name,
        span: Span::default(),
    })
}

fn string_lit() -> impl Strategy<Value = StringLit> {
    "[a-zA-Z0-9 \"\\\\\t\n.,:é]{0,16}".prop_map(|value| StringLit {
        value,
        span: Span::default(),
    })
}

fn expr() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![
        (0i64..=i64::MAX).prop_map(ExprKind::Integer),
        prop_oneof![
            (0.0f64..1e6),
            prop::num::f64::POSITIVE.prop_filter("finite", |v| v.is_finite())
        ]
        .prop_map(ExprKind::Float),
        ident().prop_map(|i| ExprKind::Name(i.name)),
    ]
    .prop_map(|kind| Expr::new(kind, Span::default()));
    leaf.prop_recursive(6, 48, 3, |inner| {
        let op = prop::sample::select(vec![
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Div,
            BinaryOp::Rem,
            BinaryOp::Pow,
            BinaryOp::Less,
            BinaryOp::LessEqual,
            BinaryOp::Greater,
            BinaryOp::GreaterEqual,
            BinaryOp::Equal,
            BinaryOp::NotEqual,
        ]);
        prop_oneof![
            inner.clone().prop_map(|e| ExprKind::Negate(Box::new(e))),
            (op, inner.clone(), inner.clone()).prop_map(|(op, a, b)| ExprKind::Binary(
                op,
                Box::new(a),
                Box::new(b)
            )),
            (inner.clone(), inner.clone(), inner).prop_map(|(c, a, b)| {
                ExprKind::Conditional(Box::new(c), Box::new(a), Box::new(b))
            }),
        ]
        .prop_map(|kind| Expr::new(kind, Span::default()))
    })
}

fn param() -> impl Strategy<Value = Param> {
    (
        prop::sample::select(Mode::ALL.to_vec()),
        prop::sample::select(ElementType::ALL.to_vec()),
        ident(),
        prop::collection::vec(expr(), 0..3),
    )
        .prop_map(|(mode, element_type, name, dims)| Param {
            mode,
            element_type,
            name,
            dims,
            span: Span::default(),
        })
}

fn clause() -> impl Strategy<Value = Clause> {
    prop_oneof![
        string_lit().prop_map(Clause::Required),
        string_lit().prop_map(Clause::Backend),
        expr().prop_map(Clause::CalcOrder),
        expr().prop_map(Clause::Parallel),
        Just(Clause::Threads(Span::default())),
    ]
}

fn define() -> impl Strategy<Value = Define> {
    (
        ident(),
        prop::collection::vec(param(), 0..4),
        prop::option::of(string_lit()),
        prop::collection::vec(clause(), 0..4),
        string_lit(),
        prop::collection::vec(ident(), 1..3),
        prop::collection::vec(ident(), 0..4),
    )
        .prop_map(
            |(name, params, description, clauses, language, path, args)| Define {
                name,
                params,
                description,
                clauses,
                calls: Calls {
                    language,
                    path,
                    args,
                    span: Span::default(),
                },
                span: Span::default(),
            },
        )
}

fn file() -> impl Strategy<Value = IdlFile> {
    prop::collection::vec(
        prop_oneof![
            ident().prop_map(Item::Module),
            string_lit().prop_map(Item::Library),
            string_lit().prop_map(Item::Required),
            define().prop_map(|d| Item::Define(Box::new(d))),
        ],
        0..5,
    )
    .prop_map(|items| IdlFile { items })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn printed_expressions_parse_to_the_same_tree(e in expr()) {
        let text = e.to_string();
        let parsed = ninf_idl::parser::parse_expression(&text)
            .unwrap_or_else(|d| panic!("`{text}` did not parse: {d:?}"));
        prop_assert_eq!(parsed, e, "text: {}", text);
    }

    #[test]
    fn printed_files_parse_to_the_same_tree(f in file()) {
        let text = f.to_string();
        let parsed = ninf_idl::parse(&SourceFile::new("p.idl", text.clone()))
            .unwrap_or_else(|d| panic!("did not parse:\n{text}\n{d}"));
        prop_assert_eq!(parsed, f, "text:\n{}", text);
    }

    #[test]
    fn compiling_arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let _ = ninf_idl::compile(&SourceFile::new("fuzz.idl", text)).map_err(|d| d.to_string());
    }

    #[test]
    fn compiling_token_soup_never_panics(tokens in prop::collection::vec(prop::sample::select(vec![
        "Define", "Module", "Library", "Required", "Calls", "CalcOrder", "Parallel", "Backend", "Threads",
        "IN", "OUT", "INOUT", "WORK", "int", "double", "string", "n", "a", "(", ")", "[", "]",
        ";", ",", "::", "?", ":", "+", "-", "*", "/", "%", "^", "<", "==", "\"C\"", "\"Rust\"",
        "0", "7", "2.5", "/*", "*/", "//", "\n", "\"", "=", "@",
    ]), 0..80)) {
        let text = tokens.join(" ");
        let _ = ninf_idl::compile(&SourceFile::new("soup.idl", text)).map_err(|d| d.to_string());
    }

    #[test]
    fn mutated_examples_never_panic(cut in 0usize..2000, insert in "\\PC{0,3}") {
        let text = include_str!("../../routines/idl/linpack.idl");
        let mut cut = cut.min(text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let mutated = format!("{}{insert}{}", &text[..cut], &text[cut..]);
        let _ = ninf_idl::compile(&SourceFile::new("m.idl", mutated)).map_err(|d| d.to_string());
    }
}

#[test]
fn deeply_nested_input_is_refused_not_a_stack_overflow() {
    let deep = format!(
        "Define f(IN int n) CalcOrder {}n{} Calls \"C\" f(n);",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    let error = ninf_idl::compile(&SourceFile::new("deep.idl", deep)).unwrap_err();
    assert!(
        error.items[0]
            .message
            .contains("nested more than 64 levels"),
        "{}",
        error.items[0].message
    );

    let long = format!(
        "Define f(IN int n) CalcOrder n{} Calls \"C\" f(n);",
        " + n".repeat(100_000)
    );
    let error = ninf_idl::compile(&SourceFile::new("long.idl", long)).unwrap_err();
    assert_eq!(
        error.items[0].message,
        "expression too long: split it or simplify it"
    );

    let negations = format!(
        "Define f(IN int n) CalcOrder {}n Calls \"C\" f(n);",
        "-".repeat(100_000)
    );
    assert!(ninf_idl::compile(&SourceFile::new("neg.idl", negations)).is_err());
}

#[test]
fn the_example_prints_to_a_fixed_point() {
    let source = SourceFile::new(
        "linpack.idl",
        include_str!("../../routines/idl/linpack.idl"),
    );
    let tree = ninf_idl::parse(&source).unwrap();
    let printed = tree.to_string();
    let again = ninf_idl::parse(&SourceFile::new("printed.idl", printed.clone())).unwrap();
    assert_eq!(again, tree);
    assert_eq!(again.to_string(), printed);
    // The canonical text of the checked module compiles to the same module.
    let module = ninf_idl::compile(&source).unwrap();
    let recompiled = ninf_idl::compile(&SourceFile::new("linpack.idl", module.to_idl())).unwrap();
    assert_eq!(recompiled, module);
}
