//! Every kind of bad line gets its JSON-RPC answer; good lines pass whole.

use serde_json::{Value, json};

use super::{InFlight, MAX_LINE, Verdict, judge};

fn answer(line: &[u8]) -> (Value, i64, String) {
    match judge(line, &InFlight::default()) {
        Verdict::Answer(a) => (
            a["id"].clone(),
            a["error"]["code"].as_i64().unwrap(),
            a["error"]["message"].as_str().unwrap().to_owned(),
        ),
        other => panic!(
            "{} was not answered: {other:?}",
            String::from_utf8_lossy(line)
        ),
    }
}

#[test]
fn malformed_lines_get_parse_errors_with_a_null_id() {
    for line in [
        &b"{not json"[..],
        b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"x\"\xff}",
        &[b'['; 100_000],
        b"\"just a string",
    ] {
        let (id, code, message) = answer(line);
        assert_eq!((id, code), (Value::Null, -32700), "{message}");
        assert!(message.starts_with("Parse error: "), "{message}");
        assert!(message.len() < 200, "{message}");
    }
}

#[test]
fn the_id_of_a_line_too_deep_or_too_long_is_read_from_its_start() {
    use super::leading_id;
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":"req-7","method":"x","params":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let (id, code, _) = answer(deep.as_bytes());
    assert_eq!((id, code), (json!("req-7"), -32700));
    // After other members, nested ones and strings with brackets and quotes in them.
    assert_eq!(
        leading_id(
            br#" { "method" : "a{[\"]", "params": {"x": [1, {"y": "}"}]}, "n": -1.5e3, "id" : 9 , "#
        ),
        Some(json!(9))
    );
    for no_id in [
        &br#"{"method":"x","params":{"a":[1,2"#[..],
        br#"{"id": 1.5, "method": "x"}"#,
        br#"{"id": {"a": 1}}"#,
        br#"{"id": "cut"#,
        br#"{"id": 12"#,
        b"[1, 2]",
        b"",
    ] {
        assert_eq!(
            leading_id(no_id),
            None,
            "{}",
            String::from_utf8_lossy(no_id)
        );
    }
}

#[test]
fn well_formed_but_invalid_messages_get_invalid_request() {
    let cases = [
        (
            json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]),
            Value::Null,
        ),
        (json!(42), Value::Null),
        (json!({"id": 3, "method": "ping"}), json!(3)),
        (json!({"jsonrpc": "2.0", "id": 4}), json!(4)),
        (json!({"jsonrpc": "2.0", "id": 5, "method": 7}), json!(5)),
        (
            json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}),
            Value::Null,
        ),
        (
            json!({"jsonrpc": "2.0", "id": "i".repeat(257), "method": "ping"}),
            Value::Null,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}),
            Value::Null,
        ),
    ];
    for (message, id) in cases {
        let (got_id, code, text) = answer(message.to_string().as_bytes());
        assert_eq!((got_id, code), (id, -32600), "{message}: {text}");
    }
}

#[test]
fn tools_call_parameters_are_checked_and_named() {
    for (params, says) in [
        (
            json!({"name": "calculator", "arguments": [1, 2]}),
            "`arguments` must be a JSON object",
        ),
        (
            json!({"name": "calculator", "arguments": "2+2"}),
            "`arguments` must be a JSON object",
        ),
        (
            json!({"name": "calculator", "arguments": 4}),
            "`arguments` must be a JSON object",
        ),
        (json!({"arguments": {}}), "needs `name`"),
        (json!({"name": 5}), "needs `name`"),
        (json!([1]), "needs `params`"),
    ] {
        let line = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params});
        let (id, code, text) = answer(line.to_string().as_bytes());
        assert_eq!((id, code), (json!(9), -32602), "{text}");
        assert!(text.contains(says), "{text}");
    }
    let good = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "calculator", "arguments": {"expression": "1"}}});
    assert_eq!(
        judge(good.to_string().as_bytes(), &InFlight::default()),
        Verdict::Forward
    );
}

#[test]
fn an_id_in_flight_cannot_be_reused_until_answered_or_cancelled() {
    let in_flight = InFlight::default();
    let request = json!({"jsonrpc": "2.0", "id": "a", "method": "ping"}).to_string();
    assert_eq!(judge(request.as_bytes(), &in_flight), Verdict::Forward);
    let Verdict::Answer(again) = judge(request.as_bytes(), &in_flight) else {
        panic!("a reused id was handed on");
    };
    assert_eq!(
        (again["id"].clone(), again["error"]["code"].clone()),
        (json!("a"), json!(-32600))
    );
    // The answer frees it.
    let answer = json!({"jsonrpc": "2.0", "id": "a", "result": {}}).to_string();
    in_flight.remove(&super::answered_id(answer.as_bytes()).unwrap());
    assert_eq!(judge(request.as_bytes(), &in_flight), Verdict::Forward);
    // So does a cancel.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "a"}});
    assert_eq!(
        judge(cancel.to_string().as_bytes(), &in_flight),
        Verdict::Forward
    );
    assert_eq!(judge(request.as_bytes(), &in_flight), Verdict::Forward);
    // Notifications and blank lines need no answer.
    assert_eq!(judge(b"  \r", &in_flight), Verdict::Skip);
}

#[tokio::test]
async fn oversized_lines_are_skipped_and_answered_and_reading_goes_on() {
    let mut input = vec![b'x'; MAX_LINE + 10];
    input.push(b'\n');
    input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
    let (service, mut from_reader) = tokio::io::duplex(1 << 20);
    let (tx, mut rx) = tokio::sync::mpsc::channel(super::QUEUED_ANSWERS);
    super::read_client(&input[..], service, InFlight::default(), tx)
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&rx.recv().await.unwrap()).unwrap();
    assert_eq!(answer["error"]["code"], json!(-32600));
    assert_eq!(answer["id"], Value::Null);
    // One whose id can be read from its start is answered with it.
    let mut input = br#"{"jsonrpc":"2.0","method":"tools/call","id":52,"params":{"name":"write_file","arguments":{"content":""#.to_vec();
    input.extend(std::iter::repeat_n(b'x', MAX_LINE));
    input.extend_from_slice(b"\"}}}\n");
    let (service, _from_reader) = tokio::io::duplex(1 << 20);
    let (tx, mut rx) = tokio::sync::mpsc::channel(super::QUEUED_ANSWERS);
    super::read_client(&input[..], service, InFlight::default(), tx)
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&rx.recv().await.unwrap()).unwrap();
    assert_eq!(
        (&answer["id"], &answer["error"]["code"]),
        (&json!(52), &json!(-32600))
    );
    let mut forwarded = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut from_reader, &mut forwarded)
        .await
        .unwrap();
    assert_eq!(
        forwarded,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"
    );
}

proptest::proptest! {
    #[test]
    fn any_bytes_get_a_json_rpc_answer_or_pass(line in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        let line: Vec<u8> = line.into_iter().filter(|b| *b != b'\n').collect();
        match judge(&line, &InFlight::default()) {
            Verdict::Skip => proptest::prop_assert!(line.iter().all(u8::is_ascii_whitespace)),
            Verdict::Forward => {
                let v: Value = serde_json::from_slice(&line).unwrap();
                proptest::prop_assert_eq!(&v["jsonrpc"], "2.0");
            }
            Verdict::Answer(a) => {
                // The answer is itself one well-formed line.
                let text = a.to_string();
                proptest::prop_assert!(!text.contains('\n'));
                proptest::prop_assert_eq!(&a["jsonrpc"], "2.0");
                proptest::prop_assert!(a["error"]["code"].is_i64());
                proptest::prop_assert!(a["id"].is_null() || a["id"].is_string() || a["id"].is_number());
            }
        }
    }

    #[test]
    fn well_formed_requests_pass_whole(id in 0i64..1_000_000, method in "[a-z/]{1,20}", key in "\\PC{0,10}", value in "\\PC{0,30}") {
        proptest::prop_assume!(method != "tools/call");
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {key: value}}).to_string();
        proptest::prop_assert_eq!(judge(line.as_bytes(), &InFlight::default()), Verdict::Forward);
    }
}
