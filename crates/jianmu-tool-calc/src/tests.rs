//! The calculator against Python 3's answers, and every bad input it must survive.

use std::time::Instant;

use super::*;

#[track_caller]
fn check(input: &str, expect: &str) {
    let got = match evaluate(input) {
        Ok(v) => v,
        Err(e) => format!("error: {e}"),
    };
    assert_eq!(got, expect, "input: {:?}", input.get(..80).unwrap_or(input));
}

#[test]
fn python_semantics() {
    check("2+2", "4");
    check("2**100", "1267650600228229401496703205376");
    check("7/2", "3.5");
    check("4/2", "2.0");
    check("-7//2", "-4");
    check("7//-2", "-4");
    check("-7%3", "2");
    check("7%-3", "-2");
    check("-2**2", "-4");
    check("2**3**2", "512");
    check("2**-1", "0.5");
    check("-2**-2", "-0.25");
    check("(-2)**-1", "-0.5");
    check("0.1+0.2", "0.30000000000000004");
    check("10**16/1", "1e+16");
    check("10**15*1.0", "1000000000000000.0");
    check("1/3", "0.3333333333333333");
    check("0/-5", "-0.0");
    check("-(0)", "0");
    check("-0.0", "-0.0");
    check("7.5//-2", "-4.0");
    check("-7.5%2", "0.5");
    check("5.", "5.0");
    check(".5", "0.5");
    check("00", "0");
    check("01.5", "1.5");
    check("0.0**0", "1.0");
    check("1/10**5", "1e-05");
    check("1/10**4", "0.0001");
    check(" ( 1 + 2 ) * 3 ", "9");
    check("--+-3", "-3");
    check("2**53+1.0", "9007199254740992.0");
    check("9223372036854775807+1", "9223372036854775808");
    check("-9223372036854775808//-1", "9223372036854775808");
    check("-9223372036854775808%-1", "0");
    check("10**400/10**399", "10.0");
    check("(10**400+1)//10**399", "10");
    check("2**1023*2.0", "inf");
    check("2**1023*1.0+2**1022*1.9", "1.752750806490758e+308");
    check("10.0**308*10", "inf");
    check("10.0**308*10-10.0**308*10", "nan");
    check("1/2**1074", "5e-324");
    check("1/2**1080", "0.0");
    check("3%2.5", "0.5");
    check("2**0.5", "1.4142135623730951");
    check("(-8)**3.0", "-512.0");
    check("1//0.3", "3.0");
    check("((5166099901794)**3)**-2", "5.260453649022537e-77");
    check("(-2)**-3", "-0.125");
    check("1244283845561997.25*1", "1244283845561997.2");
    check("((16.)**2)**(-3)", "5.960464477539063e-08");
}

#[test]
fn python_errors() {
    check("1/0", "error: ZeroDivisionError: division by zero");
    check(
        "1//0",
        "error: ZeroDivisionError: integer division or modulo by zero",
    );
    check("1%0", "error: ZeroDivisionError: integer modulo by zero");
    check("1.0/0", "error: ZeroDivisionError: float division by zero");
    check(
        "1.0//0",
        "error: ZeroDivisionError: float floor division by zero",
    );
    check("1.0%0", "error: ZeroDivisionError: float modulo");
    check(
        "0**-1",
        "error: ZeroDivisionError: 0.0 cannot be raised to a negative power",
    );
    check(
        "10.0**400",
        "error: OverflowError: (34, 'Numerical result out of range')",
    );
    check(
        "2**1024*1.0",
        "error: OverflowError: int too large to convert to float",
    );
    check(
        "10**400/3**-1",
        "error: OverflowError: int too large to convert to float",
    );
    check(
        "10**400/3",
        "error: OverflowError: integer division result too large for a float",
    );
    check(
        "(-8)**0.5",
        "error: ValueError: a negative number raised to a fractional power has a complex result, which this calculator does not compute",
    );
    check(
        "2**20000",
        "error: ValueError: Exceeds the limit (4300 digits) for integer string conversion; the result has 6021 digits",
    );
}

#[test]
fn refused_characters_use_the_python_tools_message() {
    check(
        "2+a",
        "error: Only math expressions allowed, got: 2+a (character 'a' at byte 2 is not one of: digits, + - * / % ( ) . and space)",
    );
    check(
        "__import__('os')",
        "error: Only math expressions allowed, got: __import__('os') (character '_' at byte 0 is not one of: digits, + - * / % ( ) . and space)",
    );
    check(
        "1\n+1",
        "error: Only math expressions allowed, got: 1\n+1 (character '\\n' at byte 1 is not one of: digits, + - * / % ( ) . and space)",
    );
    check(
        "１+1",
        "error: Only math expressions allowed, got: １+1 (character '１' at byte 0 is not one of: digits, + - * / % ( ) . and space)",
    );
}

#[test]
fn syntax_errors_say_where() {
    check("", "error: SyntaxError: empty expression");
    check("   ", "error: SyntaxError: empty expression");
    check(
        "(1+2",
        "error: SyntaxError: '(' at position 0 was never closed",
    );
    check("1+2)", "error: SyntaxError: unmatched ')' at position 3");
    check("1+", "error: SyntaxError: unexpected end of expression");
    check(
        "2 3",
        "error: SyntaxError: unexpected number '3' at position 2: an operator is missing",
    );
    check(
        "2(3)",
        "error: SyntaxError: unexpected '(' at position 1: an operator is missing",
    );
    check(
        "1.2.3",
        "error: SyntaxError: unexpected number '.3' at position 3: an operator is missing",
    );
    check("2* *3", "error: SyntaxError: unexpected '*' at position 3");
    check("*3", "error: SyntaxError: unexpected '*' at position 0");
    check(
        ".",
        "error: SyntaxError: a lone '.' at position 0 is not a number",
    );
    check(
        "007",
        "error: SyntaxError: leading zeros in decimal integer literals are not permitted (at position 0)",
    );
    check(
        "()",
        "error: SyntaxError: empty parentheses at position 0: Python reads them as an empty tuple, which is not a number",
    );
}

/// Hostile inputs: each is a clear error, fast, with bounded memory.
#[test]
fn hostile_inputs_fail_fast() {
    let deep = format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000));
    let megabyte = "1+".repeat(512 * 1024) + "1";
    let deep_ok = format!("{}1{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
    let too_deep = format!(
        "{}1{}",
        "(".repeat(MAX_DEPTH + 1),
        ")".repeat(MAX_DEPTH + 1)
    );
    let tower = vec!["2"; 300].join("**");
    let signs = format!("{}1", "-".repeat(MAX_INPUT_LEN - 1));
    let cases: Vec<(&str, &str)> = vec![
        (
            &deep,
            "error: limit exceeded: the expression is 200001 bytes long; the limit is 10000",
        ),
        (
            &megabyte,
            "error: limit exceeded: the expression is 1048577 bytes long; the limit is 10000",
        ),
        (&deep_ok, "1"),
        (
            &too_deep,
            "error: limit exceeded: too many nested parentheses or powers: the limit is 200",
        ),
        (
            &tower,
            "error: limit exceeded: too many nested parentheses or powers: the limit is 200",
        ),
        (&signs, "-1"),
        (
            "2**99999999",
            "error: limit exceeded: integer result too large: exact integers are limited to 32768 bits (about 9864 decimal digits)",
        ),
        (
            "9**9**9",
            "error: limit exceeded: integer result too large: exact integers are limited to 32768 bits (about 9864 decimal digits)",
        ),
        (
            "(2**30000)*(2**30000)",
            "error: limit exceeded: integer result too large: exact integers are limited to 32768 bits (about 9864 decimal digits)",
        ),
        (
            "2**99999999999999999999999",
            "error: limit exceeded: integer result too large: exact integers are limited to 32768 bits (about 9864 decimal digits)",
        ),
        ("1**99999999999999999999999", "1"),
        ("(-1)**99999999999999999999999", "-1"),
        ("0**99999999999999999999999", "0"),
        (
            "2.0**99999999",
            "error: OverflowError: (34, 'Numerical result out of range')",
        ),
    ];
    for (input, expect) in cases {
        let start = Instant::now();
        check(input, expect);
        // Not a benchmark: a generous bound that only a pathological path would break.
        assert!(
            start.elapsed().as_secs() < 2,
            "{:.40}... took {:?}",
            input,
            start.elapsed()
        );
    }
}

#[test]
fn float_repr_matches_python() {
    for (f, s) in [
        (1e16, "1e+16"),
        (1234567890123456.0, "1234567890123456.0"),
        (1e-5, "1e-05"),
        (0.0001, "0.0001"),
        (1.5e-7, "1.5e-07"),
        (1e100, "1e+100"),
        (-2.5, "-2.5"),
        (123.456, "123.456"),
        (f64::MAX, "1.7976931348623157e+308"),
        (5e-324, "5e-324"),
        (f64::NEG_INFINITY, "-inf"),
    ] {
        assert_eq!(num::float_repr(f), s);
    }
}

#[tokio::test]
async fn tool_takes_a_string_or_input_object() {
    use jianmu_tool_core::{ExecuteOptions, ToolHandle};
    let tool = ToolHandle::new(Calculator).unwrap();
    assert!(tool.spec().takes_bare_string());
    assert!(tool.spec().effect_tags.is_empty());
    let o = ExecuteOptions::default();
    let out = tool.execute(serde_json::json!("6*7"), o).await.unwrap();
    assert_eq!(out.text, "42");
    let out = tool
        .execute(serde_json::json!({"input": "2**10"}), o)
        .await
        .unwrap();
    assert_eq!(out.text, "1024");
    let err = tool.execute(serde_json::json!("1/0"), o).await.unwrap_err();
    assert!(err.is_model_facing());
    assert_eq!(err.to_string(), "ZeroDivisionError: division by zero");
}
