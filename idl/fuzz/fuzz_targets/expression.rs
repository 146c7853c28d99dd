//! Fuzzes expression parsing and evaluation: errors are values, never panics or wraps.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (String, i64, i64)| {
    let (text, n, m) = input;
    if let Ok(expr) = ninf_idl::parser::parse_expression(&text) {
        let bindings = [("n", n), ("m", m)];
        let _ = expr.eval_integer(&bindings);
        let _ = expr.eval_real(&bindings);
        let printed = expr.to_string();
        assert_eq!(ninf_idl::parser::parse_expression(&printed).ok(), Some(expr));
    }
});
