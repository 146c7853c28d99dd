//! Evaluation of IDL expressions at call time. Sizes use exact 64-bit integer arithmetic
//! with every overflow detected; CalcOrder uses f64. Errors are values, never panics or
//! wrapped numbers.

use crate::ast::{BinaryOp, Expr, ExprKind};

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    #[error("division by zero in `{0}`")]
    DivisionByZero(String),
    #[error("integer overflow in `{0}`")]
    Overflow(String),
    #[error("negative exponent in `{0}` (sizes are integers)")]
    NegativeExponent(String),
    #[error("`{0}` is not a finite number")]
    NotFinite(String),
    #[error("no value for `{0}`")]
    Unbound(String),
    #[error("`{0}` is a floating-point literal, but sizes are integers")]
    FloatInIntegerContext(String),
}

/// Values of the IN scalar parameters an expression may read.
pub trait Bindings {
    fn get(&self, name: &str) -> Option<i64>;
}

impl Bindings for std::collections::BTreeMap<String, i64> {
    fn get(&self, name: &str) -> Option<i64> {
        std::collections::BTreeMap::get(self, name).copied()
    }
}

impl Bindings for std::collections::HashMap<String, i64> {
    fn get(&self, name: &str) -> Option<i64> {
        std::collections::HashMap::get(self, name).copied()
    }
}

impl Bindings for [(&str, i64)] {
    fn get(&self, name: &str) -> Option<i64> {
        self.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
    }
}

impl<const N: usize> Bindings for [(&str, i64); N] {
    fn get(&self, name: &str) -> Option<i64> {
        Bindings::get(self.as_slice(), name)
    }
}

impl Expr {
    /// Exact integer value: `/` truncates toward zero, `%` keeps the dividend's sign, `^` needs
    /// a non-negative exponent, comparisons give 0 or 1 and `c ? a : b` tests `c != 0`.
    pub fn eval_integer(&self, bindings: &(impl Bindings + ?Sized)) -> Result<i64, EvalError> {
        let overflow = || EvalError::Overflow(self.to_string());
        Ok(match &self.kind {
            ExprKind::Integer(v) => *v,
            ExprKind::Float(_) => return Err(EvalError::FloatInIntegerContext(self.to_string())),
            ExprKind::Name(name) => bindings
                .get(name)
                .ok_or_else(|| EvalError::Unbound(name.clone()))?,
            ExprKind::Negate(e) => e
                .eval_integer(bindings)?
                .checked_neg()
                .ok_or_else(overflow)?,
            ExprKind::Conditional(c, a, b) => {
                if c.eval_integer(bindings)? != 0 {
                    a.eval_integer(bindings)?
                } else {
                    b.eval_integer(bindings)?
                }
            }
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (a.eval_integer(bindings)?, b.eval_integer(bindings)?);
                match op {
                    BinaryOp::Add => x.checked_add(y).ok_or_else(overflow)?,
                    BinaryOp::Sub => x.checked_sub(y).ok_or_else(overflow)?,
                    BinaryOp::Mul => x.checked_mul(y).ok_or_else(overflow)?,
                    BinaryOp::Div | BinaryOp::Rem if y == 0 => {
                        return Err(EvalError::DivisionByZero(self.to_string()));
                    }
                    BinaryOp::Div => x.checked_div(y).ok_or_else(overflow)?,
                    BinaryOp::Rem => x.checked_rem(y).ok_or_else(overflow)?,
                    BinaryOp::Pow => {
                        let exponent = u32::try_from(y).map_err(|_| {
                            if y < 0 {
                                EvalError::NegativeExponent(self.to_string())
                            } else {
                                overflow()
                            }
                        })?;
                        x.checked_pow(exponent).ok_or_else(overflow)?
                    }
                    BinaryOp::Less => i64::from(x < y),
                    BinaryOp::LessEqual => i64::from(x <= y),
                    BinaryOp::Greater => i64::from(x > y),
                    BinaryOp::GreaterEqual => i64::from(x >= y),
                    BinaryOp::Equal => i64::from(x == y),
                    BinaryOp::NotEqual => i64::from(x != y),
                }
            }
        })
    }

    /// Real value, for CalcOrder: `/` is real division (`2 * n ^ 3 / 3` is exactly
    /// (2/3)n^3), `%` is the real remainder. A zero divisor or a non-finite result is an error.
    pub fn eval_real(&self, bindings: &(impl Bindings + ?Sized)) -> Result<f64, EvalError> {
        let value = match &self.kind {
            ExprKind::Integer(v) => *v as f64,
            ExprKind::Float(v) => *v,
            ExprKind::Name(name) => bindings
                .get(name)
                .ok_or_else(|| EvalError::Unbound(name.clone()))?
                as f64,
            ExprKind::Negate(e) => -e.eval_real(bindings)?,
            ExprKind::Conditional(c, a, b) => {
                if c.eval_real(bindings)? != 0.0 {
                    a.eval_real(bindings)?
                } else {
                    b.eval_real(bindings)?
                }
            }
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (a.eval_real(bindings)?, b.eval_real(bindings)?);
                let truth = |t: bool| if t { 1.0 } else { 0.0 };
                match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Sub => x - y,
                    BinaryOp::Mul => x * y,
                    BinaryOp::Div | BinaryOp::Rem if y == 0.0 => {
                        return Err(EvalError::DivisionByZero(self.to_string()));
                    }
                    BinaryOp::Div => x / y,
                    BinaryOp::Rem => x % y,
                    BinaryOp::Pow => x.powf(y),
                    BinaryOp::Less => truth(x < y),
                    BinaryOp::LessEqual => truth(x <= y),
                    BinaryOp::Greater => truth(x > y),
                    BinaryOp::GreaterEqual => truth(x >= y),
                    BinaryOp::Equal => truth(x == y),
                    BinaryOp::NotEqual => truth(x != y),
                }
            }
        };
        if value.is_finite() {
            Ok(value)
        } else {
            Err(EvalError::NotFinite(self.to_string()))
        }
    }
}
