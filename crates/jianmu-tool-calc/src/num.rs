//! Python's numbers for the calculator: exact integers (machine-sized when they fit,
//! big otherwise) and IEEE doubles, with Python 3's operator semantics and messages.

use num_bigint::{BigInt, BigUint, Sign};
use num_integer::Integer;
use num_traits::{One, Signed, ToPrimitive, Zero};

use crate::{CalcError, MAX_INT_BITS, MAX_STR_DIGITS};

/// A value: `Small` for integers that fit in `i64`, `Big` only for those that do not.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Num {
    Small(i64),
    Big(BigInt),
    Float(f64),
}

/// A binary operator of the accepted language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    TrueDiv,
    FloorDiv,
    Mod,
    Pow,
}

impl Num {
    fn from_big(b: BigInt) -> Result<Num, CalcError> {
        if let Some(small) = b.to_i64() {
            return Ok(Num::Small(small));
        }
        if b.bits() > MAX_INT_BITS {
            return Err(too_big());
        }
        Ok(Num::Big(b))
    }

    /// The integer value; floats never get here (`binop` sends them to `float_op`
    /// first), and would read as zero.
    fn to_big(&self) -> BigInt {
        match self {
            Num::Small(v) => BigInt::from(*v),
            Num::Big(b) => b.clone(),
            Num::Float(_) => BigInt::zero(),
        }
    }

    fn to_f64(&self) -> Result<f64, CalcError> {
        match self {
            Num::Small(v) => Ok(small_to_f64(*v)),
            Num::Big(b) => big_to_f64(b)
                .ok_or_else(|| CalcError::overflow("int too large to convert to float")),
            Num::Float(f) => Ok(*f),
        }
    }

    pub(crate) fn neg(self) -> Result<Num, CalcError> {
        Ok(match self {
            Num::Small(v) => match v.checked_neg() {
                Some(n) => Num::Small(n),
                None => Num::from_big(-BigInt::from(v))?,
            },
            Num::Big(b) => Num::from_big(-b)?,
            Num::Float(f) => Num::Float(-f),
        })
    }

    /// Python's `str()` of the value.
    pub(crate) fn to_python_str(&self) -> Result<String, CalcError> {
        match self {
            Num::Small(v) => Ok(v.to_string()),
            Num::Big(b) => {
                let s = b.to_string();
                let digits = s.trim_start_matches('-').len();
                if digits > MAX_STR_DIGITS {
                    return Err(CalcError::value(format!(
                        "Exceeds the limit ({MAX_STR_DIGITS} digits) for integer string conversion; the result has {digits} digits"
                    )));
                }
                Ok(s)
            }
            Num::Float(f) => Ok(float_repr(*f)),
        }
    }
}

pub(crate) fn binop(op: BinOp, a: Num, b: Num) -> Result<Num, CalcError> {
    match (&a, &b) {
        (Num::Float(_), _) | (_, Num::Float(_)) => {
            let (x, y) = (a.to_f64()?, b.to_f64()?);
            float_op(op, x, y).map(Num::Float)
        }
        (Num::Small(x), Num::Small(y)) => small_op(op, *x, *y),
        _ => big_op(op, a.to_big(), b.to_big()),
    }
}

fn small_op(op: BinOp, x: i64, y: i64) -> Result<Num, CalcError> {
    let fits = match op {
        BinOp::Add => x.checked_add(y),
        BinOp::Sub => x.checked_sub(y),
        BinOp::Mul => x.checked_mul(y),
        BinOp::TrueDiv => {
            if y == 0 {
                return Err(CalcError::zero_division("division by zero"));
            }
            // Below 2**53 both convert exactly, so one IEEE division rounds correctly.
            const EXACT: i64 = 1 << 53;
            if x.abs() <= EXACT && y.abs() <= EXACT {
                return Ok(Num::Float(x as f64 / y as f64));
            }
            None
        }
        BinOp::FloorDiv => {
            if y == 0 {
                return Err(CalcError::zero_division(
                    "integer division or modulo by zero",
                ));
            }
            x.checked_div_euclid(y).map(|_| Integer::div_floor(&x, &y))
        }
        BinOp::Mod => {
            if y == 0 {
                return Err(CalcError::zero_division("integer modulo by zero"));
            }
            x.checked_rem_euclid(y).map(|_| Integer::mod_floor(&x, &y))
        }
        BinOp::Pow => {
            if y < 0 {
                return float_op(BinOp::Pow, small_to_f64(x), small_to_f64(y)).map(Num::Float);
            }
            u32::try_from(y).ok().and_then(|e| x.checked_pow(e))
        }
    };
    match fits {
        Some(v) => Ok(Num::Small(v)),
        None => big_op(op, BigInt::from(x), BigInt::from(y)),
    }
}

fn big_op(op: BinOp, x: BigInt, y: BigInt) -> Result<Num, CalcError> {
    match op {
        BinOp::Add => Num::from_big(x + y),
        BinOp::Sub => Num::from_big(x - y),
        BinOp::Mul => {
            if x.bits() + y.bits() > MAX_INT_BITS + 1 {
                return Err(too_big());
            }
            Num::from_big(x * y)
        }
        BinOp::TrueDiv => {
            if y.is_zero() {
                return Err(CalcError::zero_division("division by zero"));
            }
            int_true_div(&x, &y).map(Num::Float)
        }
        BinOp::FloorDiv => {
            if y.is_zero() {
                return Err(CalcError::zero_division(
                    "integer division or modulo by zero",
                ));
            }
            Num::from_big(x.div_floor(&y))
        }
        BinOp::Mod => {
            if y.is_zero() {
                return Err(CalcError::zero_division("integer modulo by zero"));
            }
            Num::from_big(x.mod_floor(&y))
        }
        BinOp::Pow => big_pow(&x, &y),
    }
}

fn big_pow(x: &BigInt, y: &BigInt) -> Result<Num, CalcError> {
    if y.is_negative() {
        return float_op(
            BinOp::Pow,
            Num::Big(x.clone()).to_f64()?,
            Num::Big(y.clone()).to_f64()?,
        )
        .map(Num::Float);
    }
    // Bases whose powers never grow.
    if x.is_zero() {
        return Ok(Num::Small(if y.is_zero() { 1 } else { 0 }));
    }
    if x.is_one() {
        return Ok(Num::Small(1));
    }
    if *x == -BigInt::one() {
        return Ok(Num::Small(if y.is_even() { 1 } else { -1 }));
    }
    // |x| >= 2, so the result has at least (bits(x) - 1) * y + 1 bits: refuse before
    // computing anything that would pass the limit.
    let exp = y
        .to_u64()
        .filter(|e| *e <= MAX_INT_BITS)
        .ok_or_else(too_big)?;
    if (x.bits() - 1).saturating_mul(exp) >= MAX_INT_BITS {
        return Err(too_big());
    }
    // The bound above keeps exp below MAX_INT_BITS, so it fits in u32.
    let exp = u32::try_from(exp).map_err(|_| too_big())?;
    Num::from_big(num_traits::pow::Pow::pow(x, exp))
}

fn float_op(op: BinOp, x: f64, y: f64) -> Result<f64, CalcError> {
    match op {
        BinOp::Add => Ok(x + y),
        BinOp::Sub => Ok(x - y),
        BinOp::Mul => Ok(x * y),
        BinOp::TrueDiv => {
            if y == 0.0 {
                return Err(CalcError::zero_division("float division by zero"));
            }
            Ok(x / y)
        }
        BinOp::FloorDiv => {
            if y == 0.0 {
                return Err(CalcError::zero_division("float floor division by zero"));
            }
            Ok(float_div_mod(x, y).0)
        }
        BinOp::Mod => {
            if y == 0.0 {
                return Err(CalcError::zero_division("float modulo"));
            }
            let m = x % y;
            Ok(if m != 0.0 {
                if (y < 0.0) != (m < 0.0) { m + y } else { m }
            } else {
                0.0_f64.copysign(y)
            })
        }
        BinOp::Pow => float_pow(x, y),
    }
}

/// Floor division and modulo as Python defines them for floats: the modulo takes the
/// divisor's sign and the quotient is rounded so that `q * y + m` is as close to `x`
/// as floats allow.
fn float_div_mod(x: f64, y: f64) -> (f64, f64) {
    let mut m = x % y;
    let mut div = (x - m) / y;
    if m != 0.0 {
        if (y < 0.0) != (m < 0.0) {
            m += y;
            div -= 1.0;
        }
    } else {
        m = 0.0_f64.copysign(y);
    }
    let q = if div != 0.0 {
        let f = div.floor();
        if div - f > 0.5 { f + 1.0 } else { f }
    } else {
        0.0_f64.copysign(x / y)
    };
    (q, m)
}

fn is_odd_integer(v: f64) -> bool {
    v.is_finite() && v % 2.0 != 0.0 && v.fract() == 0.0
}

/// `x ** y` for floats, with Python's special cases and errors.
fn float_pow(x: f64, y: f64) -> Result<f64, CalcError> {
    if y == 0.0 {
        return Ok(1.0);
    }
    if x.is_nan() {
        return Ok(x);
    }
    if y.is_nan() {
        return Ok(if x == 1.0 { 1.0 } else { y });
    }
    if y.is_infinite() {
        let ax = x.abs();
        return Ok(if ax == 1.0 {
            1.0
        } else if (y > 0.0) == (ax > 1.0) {
            f64::INFINITY
        } else {
            0.0
        });
    }
    if x.is_infinite() {
        let odd = is_odd_integer(y);
        return Ok(if y > 0.0 {
            if odd { x } else { x.abs() }
        } else if odd {
            0.0_f64.copysign(x)
        } else {
            0.0
        });
    }
    if x == 0.0 {
        if y < 0.0 {
            return Err(CalcError::zero_division(
                "0.0 cannot be raised to a negative power",
            ));
        }
        return Ok(if is_odd_integer(y) { x } else { 0.0 });
    }
    let mut base = x;
    let mut negate = false;
    if x < 0.0 {
        if y != y.floor() {
            return Err(CalcError::value(
                "a negative number raised to a fractional power has a complex result, which this calculator does not compute",
            ));
        }
        base = -x;
        negate = is_odd_integer(y);
    }
    if base == 1.0 {
        return Ok(if negate { -1.0 } else { 1.0 });
    }
    let r = base.powf(y);
    if r.is_infinite() {
        return Err(CalcError::overflow("(34, 'Numerical result out of range')"));
    }
    Ok(if negate { -r } else { r })
}

fn small_to_f64(v: i64) -> f64 {
    if v.unsigned_abs() <= 1 << 53 {
        v as f64
    } else {
        big_to_f64(&BigInt::from(v)).unwrap_or(f64::INFINITY)
    }
}

/// Correctly rounded (half to even) conversion; `None` when it overflows.
fn big_to_f64(v: &BigInt) -> Option<f64> {
    let mag = v.magnitude();
    let bits = mag.bits();
    let (q, shift, inexact) = if bits <= 55 {
        (mag.clone(), 0i64, false)
    } else {
        let shift = bits - 55;
        let inexact = mag.trailing_zeros().is_some_and(|tz| tz < shift);
        (mag >> shift, i64::try_from(shift).ok()?, inexact)
    };
    let r = round_to_f64(q, shift, inexact)?;
    Some(if v.sign() == Sign::Minus { -r } else { r })
}

/// `x / y` for integers, correctly rounded as Python does: exact for any size, an
/// error only when the quotient itself does not fit a float.
fn int_true_div(x: &BigInt, y: &BigInt) -> Result<f64, CalcError> {
    let negative = (x.sign() == Sign::Minus) != (y.sign() == Sign::Minus);
    let signed = |r: f64| if negative { -r } else { r };
    let (a, b) = (x.magnitude(), y.magnitude());
    if a.is_zero() {
        return Ok(signed(0.0));
    }
    let diff = a.bits() as i64 - b.bits() as i64;
    if diff > 1025 {
        return Err(division_overflow());
    }
    if diff < -1080 {
        return Ok(signed(0.0));
    }
    // Scale so the integer quotient keeps at least 55 significant bits (or every bit a
    // subnormal result can hold), then round once.
    let shift = diff.max(-1021) - 55;
    let (q, r) = if shift < 0 {
        (a << (-shift) as u64).div_rem(b)
    } else {
        (a.clone()).div_rem(&(b << shift as u64))
    };
    let r = round_to_f64(q, shift, !r.is_zero()).ok_or_else(division_overflow)?;
    Ok(signed(r))
}

/// Rounds `q * 2**shift` (with `inexact` set when nonzero bits were dropped below `q`)
/// to the nearest double, ties to even, subnormals included. `None` on overflow.
fn round_to_f64(q: BigUint, shift: i64, inexact: bool) -> Option<f64> {
    let q_bits = q.bits() as i64;
    if q_bits == 0 {
        return Some(0.0);
    }
    // The lowest kept bit sits at exponent max(top - 52, -1074).
    let top = q_bits - 1 + shift;
    let keep_from = (top - 52).max(-1074);
    let extra = keep_from - shift;
    let mantissa = if extra <= 0 {
        // Every bit fits: the value is exact.
        q.to_u64()?
    } else {
        let extra = extra as u64;
        let kept = (&q >> extra).to_u64()?;
        let half = BigUint::one() << (extra - 1);
        let low = &q & ((BigUint::one() << extra) - 1u32);
        let round_up = low > half || (low == half && (inexact || kept & 1 == 1));
        kept + u64::from(round_up)
    };
    let exp = if extra <= 0 { shift } else { keep_from };
    let r = ldexp(mantissa as f64, exp);
    r.is_finite().then_some(r)
}

/// `m * 2**e` in steps, so no intermediate overflows or underflows early.
fn ldexp(mut m: f64, mut e: i64) -> f64 {
    while e > 1000 {
        m *= 2f64.powi(1000);
        e -= 1000;
        if m.is_infinite() {
            return m;
        }
    }
    while e < -1000 {
        m *= 2f64.powi(-1000);
        e += 1000;
    }
    m * 2f64.powi(e as i32)
}

/// Python's `repr()` of a float: the shortest digits that round-trip, in positional
/// form between 1e-4 and 1e16, else in exponent form.
pub(crate) fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    // `{:e}` gives the shortest digits that round-trip, but between two equally short
    // candidates it may not take the one nearest the exact value, as Python does.
    // Formatting again at that length rounds exactly (ties to even); that result is
    // Python's whenever it still round-trips (it may not next to a power of two, where
    // the gap below is half the gap above).
    let shortest = format!("{:e}", f.abs());
    let len = shortest
        .split('e')
        .next()
        .map_or(1, |m| m.replace('.', "").len());
    let nearest = format!("{:.*e}", len - 1, f.abs());
    let sci = if nearest.parse::<f64>() == Ok(f.abs()) {
        nearest
    } else {
        shortest
    };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if f.is_sign_negative() { "-" } else { "" };
    let decpt = exp + 1;
    let n = digits.len() as i64;
    if f == 0.0 {
        return format!("{sign}0.0");
    }
    if decpt <= -4 || decpt > 16 {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{frac}e{esign}{:02}", exp.abs())
    } else if decpt <= 0 {
        format!("{sign}0.{}{digits}", "0".repeat((-decpt) as usize))
    } else if decpt >= n {
        format!("{sign}{digits}{}.0", "0".repeat((decpt - n) as usize))
    } else {
        let (int, frac) = digits.split_at(decpt as usize);
        format!("{sign}{int}.{frac}")
    }
}

fn too_big() -> CalcError {
    CalcError::limit(format!(
        "integer result too large: exact integers are limited to {MAX_INT_BITS} bits (about {} decimal digits)",
        (MAX_INT_BITS as f64 * std::f64::consts::LOG10_2) as u64
    ))
}

fn division_overflow() -> CalcError {
    CalcError::overflow("integer division result too large for a float")
}
