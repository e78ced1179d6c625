//! The `calculator` tool: the Python tools' calculator language (docs/python-compat.md),
//! evaluated as Python 3 would.
//!
//! The input is a string of the characters `0123456789+-*/().% ` (the Python tool's
//! allow-list): numbers, `+ - * / // % **`, parentheses and unary signs. The answer is
//! what Python's `str(eval(input))` prints: integers are exact (`2**100` is
//! `1267650600228229401496703205376`), `/` is true division (`7/2` is `3.5`), `//` and
//! `%` follow Python's sign rules, `**` is right-associative and binds tighter than
//! unary minus, and floats print as Python's `repr` (`0.1+0.2` is
//! `0.30000000000000004`). Errors carry Python's exception name and message
//! (`ZeroDivisionError: division by zero`).
//!
//! Limits keep every input cheap, whatever it is:
//! - input at most [`MAX_INPUT_LEN`] bytes;
//! - parentheses and powers nested at most [`MAX_DEPTH`] deep;
//! - exact integers at most [`MAX_INT_BITS`] bits, checked before computing (so
//!   `2**99999999` is refused at once);
//! - results printed with at most [`MAX_STR_DIGITS`] digits, Python's own default limit.
//!
//! Two deliberate differences from Python: `()` (an empty tuple in Python) is refused,
//! and a negative number raised to a fractional power (a complex number in Python) is
//! an error.
//!
//! ```
//! assert_eq!(jianmu_tool_calc::evaluate("2**100").unwrap(), "1267650600228229401496703205376");
//! assert_eq!(jianmu_tool_calc::evaluate("-7//2").unwrap(), "-4");
//! assert_eq!(jianmu_tool_calc::evaluate("10**16/1").unwrap(), "1e+16");
//! let err = jianmu_tool_calc::evaluate("1/0").unwrap_err();
//! assert_eq!(err.to_string(), "ZeroDivisionError: division by zero");
//! ```
#![deny(missing_docs)]

use std::fmt;

use jianmu_tool_core::{CallContext, Tool, ToolConfig, ToolError, ToolHandle};
use serde_json::{Value, json};

mod num;
mod parse;

use num::{Num, binop};
use parse::Op;

/// The longest expression accepted, in bytes.
pub const MAX_INPUT_LEN: usize = 10_000;
/// How deep parentheses and `**` may nest.
pub const MAX_DEPTH: usize = 200;
/// The largest exact integer, in bits (about 9,864 decimal digits).
pub const MAX_INT_BITS: u64 = 32_768;
/// The most digits an integer result may print with (Python's default limit).
pub const MAX_STR_DIGITS: usize = 4300;

const ALLOWED: &str = "0123456789+-*/().% ";

/// What kind of failure a [`CalcError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CalcErrorKind {
    /// A character outside the allow-list.
    Refused,
    /// Not a well-formed expression (Python's `SyntaxError`).
    Syntax,
    /// Python's `ZeroDivisionError`.
    ZeroDivision,
    /// Python's `OverflowError`.
    Overflow,
    /// Python's `ValueError`, and results Python cannot give as a number.
    Value,
    /// One of this crate's size limits.
    Limit,
}

/// Why an expression has no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalcError {
    kind: CalcErrorKind,
    message: String,
}

impl CalcError {
    fn new(kind: CalcErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
    pub(crate) fn syntax(m: impl Into<String>) -> Self {
        Self::new(CalcErrorKind::Syntax, m)
    }
    pub(crate) fn zero_division(m: impl Into<String>) -> Self {
        Self::new(CalcErrorKind::ZeroDivision, m)
    }
    pub(crate) fn overflow(m: impl Into<String>) -> Self {
        Self::new(CalcErrorKind::Overflow, m)
    }
    pub(crate) fn value(m: impl Into<String>) -> Self {
        Self::new(CalcErrorKind::Value, m)
    }
    pub(crate) fn limit(m: impl Into<String>) -> Self {
        Self::new(CalcErrorKind::Limit, m)
    }

    /// The kind of failure.
    pub fn kind(&self) -> CalcErrorKind {
        self.kind
    }

    /// The Python exception this error stands for, if any.
    pub fn python_exception(&self) -> Option<&'static str> {
        match self.kind {
            CalcErrorKind::Syntax => Some("SyntaxError"),
            CalcErrorKind::ZeroDivision => Some("ZeroDivisionError"),
            CalcErrorKind::Overflow => Some("OverflowError"),
            CalcErrorKind::Value => Some("ValueError"),
            CalcErrorKind::Refused | CalcErrorKind::Limit => None,
        }
    }
}

impl fmt::Display for CalcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.python_exception(), self.kind) {
            (Some(exc), _) => write!(f, "{exc}: {}", self.message),
            (None, CalcErrorKind::Limit) => write!(f, "limit exceeded: {}", self.message),
            (None, _) => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for CalcError {}

impl From<CalcError> for ToolError {
    fn from(e: CalcError) -> Self {
        ToolError::failed(e.to_string())
    }
}

/// Evaluates `expr` and returns what Python's `str(eval(expr))` prints.
///
/// # Errors
/// A refused character, a syntax error, a Python runtime error (`ZeroDivisionError`,
/// `OverflowError`, `ValueError`) or a size limit; see [`CalcErrorKind`].
pub fn evaluate(expr: &str) -> Result<String, CalcError> {
    if expr.len() > MAX_INPUT_LEN {
        return Err(CalcError::limit(format!(
            "the expression is {} bytes long; the limit is {MAX_INPUT_LEN}",
            expr.len()
        )));
    }
    if let Some((at, bad)) = expr.char_indices().find(|(_, c)| !ALLOWED.contains(*c)) {
        return Err(refused(expr, at, bad));
    }
    let program = parse::parse(expr)?;
    run(program)?.to_python_str()
}

fn refused(expr: &str, at: usize, bad: char) -> CalcError {
    const SHOWN: usize = 200;
    let shown = if expr.len() > SHOWN {
        let cut = (0..=SHOWN)
            .rev()
            .find(|i| expr.is_char_boundary(*i))
            .unwrap_or(0);
        format!("{}...", &expr[..cut])
    } else {
        expr.to_owned()
    };
    CalcError::new(
        CalcErrorKind::Refused,
        format!(
            "Only math expressions allowed, got: {shown} (character {bad:?} at byte {at} is not one of: digits, + - * / % ( ) . and space)"
        ),
    )
}

fn run(program: Vec<Op>) -> Result<Num, CalcError> {
    let mut stack: Vec<Num> = Vec::with_capacity(16);
    for op in program {
        match op {
            Op::Push(n) => stack.push(n),
            Op::Neg => {
                let v = pop(&mut stack)?;
                stack.push(v.neg()?);
            }
            Op::Bin(op) => {
                let b = pop(&mut stack)?;
                let a = pop(&mut stack)?;
                stack.push(binop(op, a, b)?);
            }
        }
    }
    let result = pop(&mut stack)?;
    if stack.is_empty() {
        Ok(result)
    } else {
        Err(malformed())
    }
}

fn pop(stack: &mut Vec<Num>) -> Result<Num, CalcError> {
    stack.pop().ok_or_else(malformed)
}

#[cold]
fn malformed() -> CalcError {
    // The parser only emits balanced programs; this guards the evaluator anyway.
    CalcError::syntax("malformed expression")
}

/// The `calculator` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Calculator;

impl Tool for Calculator {
    type Args = String;
    type Output = String;
    type Error = CalcError;

    const NAME: &'static str = "calculator";

    const DESCRIPTION: &'static str = "Performs basic math calculations with Python's arithmetic, e.g. '2**100' or '(3+4)*5/2'.\n\
     Accepts numbers, + - * / // % **, parentheses and unary signs. Integers are exact \
     (up to about 9,800 digits); / is true division; // and % round toward negative \
     infinity, as in Python.";

    fn input_schema() -> Value {
        json!({
            "type": "string",
            "description": "Python math expression, e.g. '2+2'",
        })
    }

    async fn call(&self, args: String, _cx: &CallContext) -> Result<String, CalcError> {
        evaluate(&args)
    }
}

fn build(_: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::new(Calculator)
}

jianmu_tool_core::register_tool!(Calculator, build);

#[cfg(test)]
mod tests;
