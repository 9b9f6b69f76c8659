//! `nononce serve` over HTTP, as a user meets it: nonces from curl that `nononce decode`
//! reads, readiness while leased, and a SIGTERM that gives the machine IDs back.

use crate::common::serve::Served;
use crate::common::*;

/// A list of 64-bit nonces in the JavaScript-safe form.
#[derive(serde::Deserialize)]
struct Batch {
    nonces: Vec<nononce::nonce::serde::js_safe::JsSafe>,
}

/// Three distinct nonces from the embedded default store, each read back by `nononce decode`
/// with the machine ID the server leased; `/readyz` ready; SIGTERM releases both IDs.
#[test]
fn three_nonces_readiness_and_release() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &[]);
    let body = served.json("/v1/nonces?count=3");
    let nonces: Vec<&str> = body["nonces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(nonces.len(), 3);
    assert!(nonces[0] != nonces[1] && nonces[1] != nonces[2] && nonces[0] != nonces[2]);
    let ready = served.json("/readyz");
    assert_eq!(ready["status"], "ready");
    let counter_id = ready["leases"][0]["machine_id"].as_u64().unwrap();
    for n in &nonces {
        assert_eq!(json(n)["machine_id"].as_u64().unwrap(), counter_id);
    }
    // `format=int` is the JavaScript-safe form: decimal strings, as `js_safe` reads them.
    let ints = served.json("/v1/nonces?count=3&format=int");
    let strings = ints["nonces"].as_array().unwrap().iter();
    assert!(
        strings.clone().all(|n| n
            .as_str()
            .is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()))),
        "{ints}"
    );
    let ints: Batch = serde_json::from_value(ints).unwrap();
    for n in ints.nonces {
        let hex = n.0.to_string();
        assert_eq!(json(&hex)["machine_id"].as_u64().unwrap(), counter_id);
    }
    // The counter factory's generation counts: the six nonces, and whatever the serving
    // thread's block holds besides (at most 8192); no refusal.
    let metrics = served.get("/metrics").1;
    let series = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in {metrics}"))
    };
    let issued =
        series("nononce_factory_nonces_total{factory=\"counter\",kind=\"counter\",bits=\"64\"}");
    assert!((6..6 + 8192).contains(&issued), "{issued}");
    assert_eq!(
        series("nononce_factory_deadline_refusals_total{factory=\"counter\"}"),
        0
    );
    let store = default_store();
    assert_eq!(held(&store).len(), 2);
    let (status, _) = served.signal("TERM");
    assert_eq!(status.code(), Some(143));
    // Released: each ID stays blocked only for the release guard.
    for (_, left) in held(&store) {
        assert!(left <= RELEASE_GUARD_S, "{left}");
    }
}
