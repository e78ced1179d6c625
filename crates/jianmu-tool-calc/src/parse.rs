//! The parser: Python's expression grammar restricted to numbers, `+ - * / // % **` and
//! parentheses, compiled to a postfix program so evaluation needs no recursion.
//!
//! ```text
//! expr   := term (('+' | '-') term)*
//! term   := factor (('*' | '/' | '//' | '%') factor)*
//! factor := ('+' | '-') factor | power
//! power  := atom ['**' factor]
//! atom   := NUMBER | '(' expr ')'
//! ```

use num_bigint::BigInt;

use crate::num::{BinOp, Num};
use crate::{CalcError, MAX_DEPTH, MAX_STR_DIGITS};

/// One step of the postfix program.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    Push(Num),
    Neg,
    Bin(BinOp),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok<'a> {
    Num(&'a str),
    Op(&'static str),
    Open,
    Close,
    End,
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    tok: Tok<'a>,
    tok_start: usize,
    depth: usize,
    out: Vec<Op>,
}

/// Parses `src` (already checked to hold only allowed characters) into a program.
pub(crate) fn parse(src: &str) -> Result<Vec<Op>, CalcError> {
    let mut p = Parser {
        src,
        pos: 0,
        tok: Tok::End,
        tok_start: 0,
        depth: 0,
        out: Vec::with_capacity(src.len() / 2 + 1),
    };
    p.advance()?;
    if p.tok == Tok::End {
        return Err(CalcError::syntax("empty expression"));
    }
    p.expr()?;
    if p.tok != Tok::End {
        return Err(p.unexpected());
    }
    Ok(p.out)
}

impl<'a> Parser<'a> {
    fn advance(&mut self) -> Result<(), CalcError> {
        let bytes = self.src.as_bytes();
        while self.pos < bytes.len() && bytes[self.pos] == b' ' {
            self.pos += 1;
        }
        self.tok_start = self.pos;
        let Some(&c) = bytes.get(self.pos) else {
            self.tok = Tok::End;
            return Ok(());
        };
        let two = bytes.get(self.pos + 1).copied();
        self.tok = match c {
            b'(' => {
                self.pos += 1;
                Tok::Open
            }
            b')' => {
                self.pos += 1;
                Tok::Close
            }
            b'*' if two == Some(b'*') => {
                self.pos += 2;
                Tok::Op("**")
            }
            b'/' if two == Some(b'/') => {
                self.pos += 2;
                Tok::Op("//")
            }
            b'+' | b'-' | b'*' | b'/' | b'%' => {
                self.pos += 1;
                Tok::Op(match c {
                    b'+' => "+",
                    b'-' => "-",
                    b'*' => "*",
                    b'/' => "/",
                    _ => "%",
                })
            }
            _ => {
                let start = self.pos;
                let mut dots = 0;
                while let Some(&d) = bytes.get(self.pos) {
                    if d == b'.' {
                        dots += 1;
                        if dots > 1 {
                            break;
                        }
                    } else if !d.is_ascii_digit() {
                        break;
                    }
                    self.pos += 1;
                }
                let text = &self.src[start..self.pos];
                if text == "." {
                    return Err(CalcError::syntax(format!(
                        "a lone '.' at position {start} is not a number"
                    )));
                }
                Tok::Num(text)
            }
        };
        Ok(())
    }

    fn unexpected(&self) -> CalcError {
        match self.tok {
            Tok::End => CalcError::syntax("unexpected end of expression"),
            Tok::Close => {
                CalcError::syntax(format!("unmatched ')' at position {}", self.tok_start))
            }
            Tok::Num(n) => CalcError::syntax(format!(
                "unexpected number '{n}' at position {}: an operator is missing",
                self.tok_start
            )),
            Tok::Open => CalcError::syntax(format!(
                "unexpected '(' at position {}: an operator is missing",
                self.tok_start
            )),
            Tok::Op(o) => {
                CalcError::syntax(format!("unexpected '{o}' at position {}", self.tok_start))
            }
        }
    }

    fn expr(&mut self) -> Result<(), CalcError> {
        self.term()?;
        while let Tok::Op(o @ ("+" | "-")) = self.tok {
            self.advance()?;
            self.term()?;
            self.out
                .push(Op::Bin(if o == "+" { BinOp::Add } else { BinOp::Sub }));
        }
        Ok(())
    }

    fn term(&mut self) -> Result<(), CalcError> {
        self.factor()?;
        while let Tok::Op(o @ ("*" | "/" | "//" | "%")) = self.tok {
            self.advance()?;
            self.factor()?;
            self.out.push(Op::Bin(match o {
                "*" => BinOp::Mul,
                "/" => BinOp::TrueDiv,
                "//" => BinOp::FloorDiv,
                _ => BinOp::Mod,
            }));
        }
        Ok(())
    }

    fn factor(&mut self) -> Result<(), CalcError> {
        // Signs are collected in a loop, so a long run of them cannot overflow the stack.
        let mut negations = 0usize;
        while let Tok::Op(o @ ("+" | "-")) = self.tok {
            negations += usize::from(o == "-");
            self.advance()?;
        }
        self.power()?;
        // Each sign applies in turn, innermost first; `--x` is `-(-x)`.
        for _ in 0..negations {
            self.out.push(Op::Neg);
        }
        Ok(())
    }

    fn power(&mut self) -> Result<(), CalcError> {
        self.atom()?;
        if self.tok == Tok::Op("**") {
            self.advance()?;
            self.enter()?;
            self.factor()?;
            self.depth -= 1;
            self.out.push(Op::Bin(BinOp::Pow));
        }
        Ok(())
    }

    fn atom(&mut self) -> Result<(), CalcError> {
        match self.tok {
            Tok::Num(text) => {
                let at = self.tok_start;
                self.out.push(Op::Push(number(text, at)?));
                self.advance()
            }
            Tok::Open => {
                let at = self.tok_start;
                self.advance()?;
                if self.tok == Tok::Close {
                    return Err(CalcError::syntax(format!(
                        "empty parentheses at position {at}: Python reads them as an empty tuple, which is not a number"
                    )));
                }
                self.enter()?;
                self.expr()?;
                self.depth -= 1;
                if self.tok != Tok::Close {
                    return Err(match self.tok {
                        Tok::End => {
                            CalcError::syntax(format!("'(' at position {at} was never closed"))
                        }
                        _ => self.unexpected(),
                    });
                }
                self.advance()
            }
            _ => Err(self.unexpected()),
        }
    }

    fn enter(&mut self) -> Result<(), CalcError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(CalcError::limit(format!(
                "too many nested parentheses or powers: the limit is {MAX_DEPTH}"
            )));
        }
        Ok(())
    }
}

fn number(text: &str, at: usize) -> Result<Num, CalcError> {
    if text.contains('.') {
        // Rust's parser rounds correctly, as Python's does; huge literals become inf
        // in both.
        return text
            .parse::<f64>()
            .map(Num::Float)
            .map_err(|e| CalcError::syntax(format!("bad number '{text}' at position {at}: {e}")));
    }
    if text.len() > 1 && text.starts_with('0') && text.bytes().any(|b| b != b'0') {
        return Err(CalcError::syntax(format!(
            "leading zeros in decimal integer literals are not permitted (at position {at})"
        )));
    }
    if let Ok(small) = text.parse::<i64>() {
        return Ok(Num::Small(small));
    }
    if text.len() > MAX_STR_DIGITS {
        return Err(CalcError::value(format!(
            "Exceeds the limit ({MAX_STR_DIGITS} digits) for integer string conversion: the literal at position {at} has {} digits",
            text.len()
        )));
    }
    text.parse::<BigInt>()
        .map(Num::Big)
        .map_err(|e| CalcError::syntax(format!("bad number '{text}' at position {at}: {e}")))
}
