//! Differential test: thousands of generated expressions, evaluated by us and by a real
//! `python3`, must give the same answers.

use std::fmt::Write as _;

use jianmu_tool_calc::{CalcErrorKind, evaluate};

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn number(rng: &mut Rng, out: &mut String) {
    match rng.below(10) {
        0..=4 => write!(out, "{}", rng.below(1000)).unwrap(),
        5 => write!(out, "{}", rng.below(10_000_000_000_000)).unwrap(),
        6 => write!(out, "{}.{}", rng.below(100), rng.below(1000)).unwrap(),
        7 => write!(out, ".{}", rng.below(100)).unwrap(),
        8 => write!(out, "{}.", rng.below(50)).unwrap(),
        _ => out.push_str(["0", "1", "2", "0.0", "0.5"][rng.below(5) as usize]),
    }
}

fn space(rng: &mut Rng, out: &mut String) {
    if rng.below(4) == 0 {
        out.push(' ');
    }
}

fn expr(rng: &mut Rng, depth: u32, out: &mut String) {
    if depth == 0 || rng.below(10) < 3 {
        number(rng, out);
        return;
    }
    match rng.below(10) {
        0 => {
            out.push(['-', '+'][rng.below(2) as usize]);
            expr(rng, depth - 1, out);
        }
        1 => {
            out.push('(');
            expr(rng, depth - 1, out);
            out.push(')');
        }
        2 => {
            // Keep powers small enough that both sides stay in range.
            out.push('(');
            expr(rng, depth.min(2) - 1, out);
            out.push_str(")**");
            let e = ["0", "1", "2", "3", "5", "-1", "-2", "0.5", "2.5", "(-3)"];
            out.push_str(e[rng.below(e.len() as u64) as usize]);
        }
        _ => {
            expr(rng, depth - 1, out);
            space(rng, out);
            let ops = ["+", "-", "*", "/", "//", "%"];
            out.push_str(ops[rng.below(ops.len() as u64) as usize]);
            space(rng, out);
            expr(rng, depth - 1, out);
        }
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const PYTHON: &str = r#"
import sys
for line in open(sys.argv[1]):
    e = line.rstrip("\n")
    try:
        r = str(eval(e))
    except Exception as x:
        r = "error: " + type(x).__name__
    print(r)
"#;

#[test]
fn agrees_with_python_eval() {
    // JIANMU_CALC_DIFF_COUNT and JIANMU_CALC_DIFF_SEED run longer or other campaigns.
    let count = env_u64("JIANMU_CALC_DIFF_COUNT", 5000);
    let mut rng = Rng(env_u64("JIANMU_CALC_DIFF_SEED", 0x9E37_79B9_7F4A_7C15) | 1);
    let exprs: Vec<String> = (0..count)
        .map(|_| {
            let mut s = String::new();
            expr(&mut rng, 5, &mut s);
            s
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("jianmu-calc-diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("exprs.txt");
    std::fs::write(&file, exprs.join("\n") + "\n").unwrap();
    let output = jianmu_process::std_command("python3")
        .arg("-c")
        .arg(PYTHON)
        .arg(&file)
        .output()
        .expect("python3 must be installed for the differential test (.ci/run installs it)");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        output.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let python = String::from_utf8(output.stdout).unwrap();
    let python: Vec<&str> = python.lines().collect();
    assert_eq!(python.len(), exprs.len());
    let count = exprs.len();

    let (mut values, mut errors, mut complex) = (0, 0, 0);
    let mut mismatches = Vec::new();
    for (e, py) in exprs.iter().zip(&python) {
        let ours = evaluate(e);
        let agree = match (&ours, py.strip_prefix("error: ")) {
            (Ok(v), None) => {
                values += 1;
                v == py
            }
            (Err(err), Some(exc)) if err.python_exception() == Some(exc) => {
                errors += 1;
                true
            }
            // Python makes a complex number, then prints it or fails on it later
            // (a TypeError for `%`, a ZeroDivisionError); we refuse it, by design.
            (Err(err), py_err)
                if err.kind() == CalcErrorKind::Value
                    && err.to_string().contains("complex result")
                    && (py_err.is_some() || py.ends_with('j') || py.ends_with("j)")) =>
            {
                complex += 1;
                true
            }
            _ => false,
        };
        if !agree {
            mismatches.push(format!("{e:?}: ours {ours:?}, python {py}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches, first ones:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(20)].join("\n")
    );
    // The generator must exercise both paths, or the test proves little.
    assert!(
        values * 5 > count * 3 && errors * 50 > count,
        "values {values}, errors {errors}, complex {complex}"
    );
}
