//! The cost model: for a routine and the actual values of its IN scalars, the bytes its
//! arrays move in and out, the bytes of its scalars, its floating-point operations and the
//! processors it occupies. Sizes are exact integers with overflow detection.

use serde::Serialize;

use crate::ast::{ElementType, Mode};
use crate::eval::{Bindings, EvalError};
use crate::interface::{FunctionInterface, Parallelism, Parameter};

/// What one call moves and computes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CostEstimate {
    /// Bytes of IN and INOUT arrays (caller to routine).
    pub bytes_in: u64,
    /// Bytes of OUT and INOUT arrays (routine to caller).
    pub bytes_out: u64,
    /// Bytes of scalar arguments (strings and files count zero: their size is only known
    /// from the actual value).
    pub scalar_bytes_in: u64,
    /// Floating-point operations from CalcOrder; 0 without one.
    pub flops: f64,
    /// Processors the call occupies.
    pub processors: u64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CostError {
    #[error("cannot evaluate dimension {dimension} of `{parameter}`: {source}")]
    Dimension {
        parameter: String,
        dimension: usize,
        source: EvalError,
    },
    #[error("dimension {dimension} of `{parameter}` is negative ({value})")]
    NegativeDimension {
        parameter: String,
        dimension: usize,
        value: i64,
    },
    #[error("size of `{parameter}` overflows 64 bits")]
    SizeOverflow { parameter: String },
    #[error("total size of the {direction} arrays overflows 64 bits")]
    TotalOverflow { direction: &'static str },
    #[error("cannot evaluate CalcOrder: {0}")]
    CalcOrder(EvalError),
    #[error("cannot evaluate Parallel: {0}")]
    Parallel(EvalError),
    #[error("Parallel gives {0} processors; a routine needs at least 1")]
    NoProcessors(i64),
}

impl FunctionInterface {
    /// Number of elements of each dimension of an array parameter (empty for a scalar).
    pub fn dimensions_of(
        &self,
        parameter: &Parameter,
        bindings: &(impl Bindings + ?Sized),
    ) -> Result<Vec<u64>, CostError> {
        parameter
            .dimensions
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let value = d
                    .eval_integer(bindings)
                    .map_err(|source| CostError::Dimension {
                        parameter: parameter.name.clone(),
                        dimension: i + 1,
                        source,
                    })?;
                u64::try_from(value).map_err(|_| CostError::NegativeDimension {
                    parameter: parameter.name.clone(),
                    dimension: i + 1,
                    value,
                })
            })
            .collect()
    }

    /// Element count of an array parameter (1 for a scalar).
    pub fn element_count(
        &self,
        parameter: &Parameter,
        bindings: &(impl Bindings + ?Sized),
    ) -> Result<u64, CostError> {
        self.dimensions_of(parameter, bindings)?
            .into_iter()
            .try_fold(1u64, u64::checked_mul)
            .ok_or_else(|| CostError::SizeOverflow {
                parameter: parameter.name.clone(),
            })
    }

    /// Bytes of an array parameter's data (its element size for a scalar; 0 for strings).
    pub fn byte_size(
        &self,
        parameter: &Parameter,
        bindings: &(impl Bindings + ?Sized),
    ) -> Result<u64, CostError> {
        let element = parameter.element_type.size_bytes().unwrap_or(0);
        self.element_count(parameter, bindings)?
            .checked_mul(element)
            .ok_or_else(|| CostError::SizeOverflow {
                parameter: parameter.name.clone(),
            })
    }

    /// Processors one call occupies.
    pub fn processors(&self, bindings: &(impl Bindings + ?Sized)) -> Result<u64, CostError> {
        match &self.parallelism {
            Parallelism::Sequential | Parallelism::Threads => Ok(1),
            Parallelism::Parallel { processors, .. } => {
                let p = processors
                    .eval_integer(bindings)
                    .map_err(CostError::Parallel)?;
                u64::try_from(p)
                    .ok()
                    .filter(|&p| p >= 1)
                    .ok_or(CostError::NoProcessors(p))
            }
        }
    }

    /// The cost of one call with these IN scalar values.
    pub fn cost(&self, bindings: &(impl Bindings + ?Sized)) -> Result<CostEstimate, CostError> {
        let mut bytes_in = 0u64;
        let mut bytes_out = 0u64;
        let mut scalar_bytes_in = 0u64;
        for parameter in &self.parameters {
            if !parameter.is_array() {
                if parameter.mode == Mode::In
                    && parameter.element_type != ElementType::String
                    && parameter.element_type != ElementType::Filename
                {
                    scalar_bytes_in += parameter.element_type.size_bytes().unwrap_or(0);
                }
                continue;
            }
            let size = self.byte_size(parameter, bindings)?;
            if parameter.mode.is_input() {
                bytes_in = bytes_in
                    .checked_add(size)
                    .ok_or(CostError::TotalOverflow { direction: "input" })?;
            }
            if parameter.mode.is_output() {
                bytes_out = bytes_out
                    .checked_add(size)
                    .ok_or(CostError::TotalOverflow {
                        direction: "output",
                    })?;
            }
        }
        let flops = match &self.calc_order {
            Some(e) => e.eval_real(bindings).map_err(CostError::CalcOrder)?,
            None => 0.0,
        };
        Ok(CostEstimate {
            bytes_in,
            bytes_out,
            scalar_bytes_in,
            flops,
            processors: self.processors(bindings)?,
        })
    }
}
