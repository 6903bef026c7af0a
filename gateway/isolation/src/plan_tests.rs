//! Plan arithmetic (the reference's worked examples), profile semantics and
//! one test per startup-validation rule, each asserting the named setting.

use super::*;
use uagate_config::Config;

const MIB: u64 = 1024 * 1024;
/// The default reassembly footprint: (max_chunk_count - 1) x max_buffer_size
/// with max_chunk_count = ceil(4194304 / (65536 - 1024)) + 1 = 67.
const FOOTPRINT: u64 = 66 * 65536;

fn config(doc: &str) -> Config {
    Config::from_toml(doc).unwrap_or_else(|e| panic!("{doc}\n{e}"))
}

fn plan(doc: &str) -> Plan {
    Plan::build(&config(doc)).unwrap_or_else(|e| panic!("{doc}\n{e}"))
}

/// Builds (parsing included) and expects a refusal naming `setting`.
fn refused(doc: &str, setting: &str) -> String {
    let result = Config::from_toml(doc)
        .map_err(PlanError::from)
        .and_then(|c| Plan::build(&c));
    match result {
        Err(e) => {
            assert_eq!(e.setting(), Some(setting), "{doc}\n{e}");
            e.to_string()
        }
        Ok(p) => panic!("{doc}\naccepted: {:#?}", p.lines()),
    }
}

const TRUSTED: &str = r#"
[isolation]
mode = "trusted_reservations"
[[isolation.trusted_owners]]
key = "plant-control"
weight = 4
reservations = [{ stage = "request_execution", reserved = 2, hard_limit = 8 }]
[[isolation.ingress]]
cidr = "10.0.5.0/24"
owner = "plant-control"
"#;

#[test]
fn default_plan_prints_the_reference_lines() {
    let p = Plan::build(&Config::default()).unwrap();
    assert_eq!(p.mode(), IsolationMode::Balanced);
    let q = 4 * MIB;
    let f = FOOTPRINT;
    let expected = vec![
        "Connection: total=103, shared=101, bootstrap=1, reconnect=1, control=0, trusted=0, ownerLimit=103".to_string(),
        "Handshake: total=103, shared=101, bootstrap=1, reconnect=1, control=0, trusted=0, ownerLimit=103".to_string(),
        // 67108864 - 2 x 4325376 = 58458112 shared.
        format!("ReassemblyBytes: total={}, shared={}, bootstrap={f}, reconnect={f}, control=0, trusted=0, ownerLimit={}", 64 * MIB, 64 * MIB - 2 * f, 64 * MIB),
        "SessionEstablishment: total=64, shared=62, bootstrap=1, reconnect=1, control=0, trusted=0, ownerLimit=64".to_string(),
        "RequestQueue: total=103, shared=100, bootstrap=1, reconnect=1, control=1, trusted=0, ownerLimit=103".to_string(),
        "RequestExecution: total=100, shared=97, bootstrap=1, reconnect=1, control=1, trusted=0, ownerLimit=100".to_string(),
        // Parked: 100 sessions x (20 + 1) Publish requests; bytes: queue + parked + execution.
        format!("RequestQueueBytes: total={}, shared={}, bootstrap={q}, reconnect={q}, control={q}, trusted=0, ownerLimit={}", 2303 * q, 2300 * q, 2303 * q),
        "ParkedRequest: total=2103, shared=2100, bootstrap=1, reconnect=1, control=1, trusted=0, ownerLimit=2103".to_string(),
    ];
    assert_eq!(p.lines(), expected);
    assert!(p.fair_scheduling());
    assert!(p.is_enforced());
    assert_eq!(p.handshake_timeout(), Duration::from_secs(120));
    assert_eq!(p.reserved_owner_entries(), 3);
    assert_eq!(p.lines()[2], "ReassemblyBytes: total=67108864, shared=58458112, bootstrap=4325376, reconnect=4325376, control=0, trusted=0, ownerLimit=67108864");
    assert_eq!(p.max_bytes_without_session(), None);
}

#[test]
fn sessions_100_channels_103_leave_101_shared_connections() {
    let p = plan("[server]\nmax_session_count = 100\nmax_channel_count = 103\n");
    let c = p.stage(Stage::Connection);
    assert_eq!(
        (
            c.total,
            c.shared,
            c.bootstrap,
            c.reconnect,
            c.control,
            c.trusted_reserved()
        ),
        (103, 101, 1, 1, 0, 0)
    );
}

#[test]
fn channels_101_fail_balanced_on_the_n_plus_one_rule() {
    let doc = "[server]\nmax_session_count = 100\nmax_channel_count = 101\n";
    let msg = refused(doc, "server.max_channel_count");
    assert!(msg.contains("101") && msg.contains("at least 103"), "{msg}");
    // The unpartitioned N+1 count is fine without reserves.
    let p = plan(&format!("{doc}[isolation]\nmode = \"fair_share\"\n"));
    assert_eq!(p.stage(Stage::Connection).shared, 101);
    // 100 channels for 100 sessions fails even without reserves.
    refused(
        "[server]\nmax_session_count = 100\nmax_channel_count = 100\n[isolation]\nmode = \"fair_share\"\n",
        "server.max_channel_count",
    );
}

#[test]
fn queue_of_10000_sizes_request_queue_at_10003_in_balanced() {
    let p = plan("[server]\nmax_queued_request_count = 10000\n");
    let q = p.stage(Stage::RequestQueue);
    assert_eq!((q.total, q.shared), (10003, 10000));
    let parked = p.stage(Stage::ParkedRequest);
    assert_eq!((parked.total, parked.shared), (10003, 10000));
    // Execution keeps its floors inside the worker limit.
    let e = p.stage(Stage::RequestExecution);
    assert_eq!((e.total, e.shared), (100, 97));
    // RequestQueueBytes: max_message_size x (queued + executing + parked) shared.
    let b = p.stage(Stage::RequestQueueBytes);
    assert_eq!(b.shared, 4 * MIB * (10000 + 100 + 10000));
    assert_eq!(b.total, b.shared + 3 * 4 * MIB);
    assert_eq!(b.unit, 4 * MIB);
}

#[test]
fn small_queue_and_worker_counts_are_taken_as_configured() {
    // Execution slots are async tasks, so no minimum of 100 applies.
    let p = plan("[server]\nmax_queued_request_count = 10\nmax_request_thread_count = 4\n");
    assert_eq!(p.stage(Stage::RequestQueue).shared, 10);
    assert_eq!(p.stage(Stage::RequestExecution).total, 4);
    assert_eq!(p.stage(Stage::RequestExecution).shared, 1);
}

#[test]
fn a_worker_count_without_shared_capacity_is_refused() {
    // Balanced keeps three worker reserves inside the total.
    let err = Plan::build(
        &uagate_config::Config::from_toml("[server]\nmax_request_thread_count = 3\n").unwrap(),
    )
    .unwrap_err();
    assert!(
        err.setting()
            .unwrap_or_default()
            .contains("max_request_thread_count"),
        "{err}"
    );
}

#[test]
fn reassembly_bytes_total_is_the_budget_and_each_reserve_one_footprint() {
    // Our footprint: (max_chunk_count - 1) x max_buffer_size, with
    // max_chunk_count = ceil(max_message_size / (max_buffer_size - 1024)) + 1.
    let p = plan("[server]\nmax_message_size = 4194304\nchunk_reassembly_budget = 67108864\n");
    let r = p.stage(Stage::ReassemblyBytes);
    assert_eq!(p.retained_message_bytes(), 4325376);
    assert_eq!(p.retained_message_bytes(), FOOTPRINT);
    assert_eq!(
        (r.total, r.bootstrap, r.reconnect, r.unit),
        (67108864, 4325376, 4325376, 4325376)
    );
    assert_eq!(r.shared, r.total - 2 * 4325376);
    assert_eq!(r.shared, 58458112);
    // Smaller buffers: ceil(16384 / 7168) + 1 = 4 chunks, footprint 3 x 8192.
    let p = plan("[server]\nmax_buffer_size = 8192\nmax_message_size = 16384\nchunk_reassembly_budget = 73728\n");
    let r = p.stage(Stage::ReassemblyBytes);
    assert_eq!(p.retained_message_bytes(), 24576);
    assert_eq!(
        (r.total, r.shared, r.bootstrap, r.reconnect),
        (73728, 24576, 24576, 24576)
    );
    // The reference's numbers with its 16.25 MiB bound.
    let p = plan("[isolation]\nmax_retained_message_bytes = 17039360\n");
    let r = p.stage(Stage::ReassemblyBytes);
    assert_eq!(
        (r.total, r.shared, r.bootstrap, r.reconnect),
        (67108864, 33030144, 17039360, 17039360)
    );
    // Larger top-level reserves.
    let p = plan("[isolation]\nreconnect_reserved_bytes = 8388608\n");
    let r = p.stage(Stage::ReassemblyBytes);
    assert_eq!(
        (r.bootstrap, r.reconnect, r.shared),
        (FOOTPRINT, 8 * MIB, 64 * MIB - FOOTPRINT - 8 * MIB)
    );
    assert_eq!(r.shared, 54394880);
}

#[test]
fn shared_only_reserves_nothing_and_is_fifo() {
    let p = plan("[isolation]\nmode = \"shared_only\"\nfair_scheduling = true\n");
    assert!(!p.is_enforced());
    assert!(!p.fair_scheduling());
    for s in p.stages() {
        assert_eq!(
            (s.bootstrap, s.reconnect, s.control),
            (0, 0, 0),
            "{}",
            s.line()
        );
        assert_eq!(s.shared, s.total);
        assert_eq!(s.owner_limit, s.total);
    }
    assert_eq!(p.stage(Stage::RequestQueue).total, 100);
    assert_eq!(p.rate().shared, p.rate().total);
    assert!(p.rate().bootstrap.is_none());
    assert_eq!(p.reserved_owner_entries(), 0);
}

#[test]
fn shared_only_caps_reassembly_bytes_without_session() {
    // Default: half the reassembly budget; the total stays the ceiling.
    let p = plan("[isolation]\nmode = \"shared_only\"\n");
    assert_eq!(p.max_bytes_without_session(), Some(32 * MIB));
    assert_eq!(p.stage(Stage::ReassemblyBytes).shared, 64 * MIB);
    // Explicit values between one footprint and the total.
    let p = plan("[isolation]\nmode = \"shared_only\"\nmax_bytes_without_session = 4325376\n");
    assert_eq!(p.max_bytes_without_session(), Some(FOOTPRINT));
    let p = plan("[isolation]\nmode = \"shared_only\"\nmax_bytes_without_session = 67108864\n");
    assert_eq!(p.max_bytes_without_session(), Some(64 * MIB));
    // A lowered ReassemblyBytes total lowers the default and the ceiling.
    let p = plan("[isolation]\nmode = \"shared_only\"\n[[isolation.stages]]\nstage = \"reassembly_bytes\"\ncapacity = 16777216\n");
    assert_eq!(p.max_bytes_without_session(), Some(8 * MIB));
    let msg = refused(
        "[isolation]\nmode = \"shared_only\"\nmax_bytes_without_session = 67108865\n",
        "isolation.max_bytes_without_session",
    );
    assert!(msg.contains("67108864"), "{msg}");
    let msg = refused(
        "[isolation]\nmode = \"shared_only\"\nmax_bytes_without_session = 4325375\n",
        "isolation.max_bytes_without_session",
    );
    assert!(msg.contains("footprint (4325376 bytes)"), "{msg}");
    // The default half of a small budget cannot hold one maximum message.
    let small =
        "[server]\nchunk_reassembly_budget = 8650751\n[isolation]\nmode = \"shared_only\"\n";
    let msg = refused(small, "isolation.max_bytes_without_session");
    assert!(msg.contains("the default"), "{msg}");
    let p = plan(&format!("{small}max_bytes_without_session = 4325376\n"));
    assert_eq!(p.max_bytes_without_session(), Some(FOOTPRINT));
    // Only shared_only has the rule; the class reserves replace it elsewhere.
    for mode in ["fair_share", "balanced"] {
        let msg = refused(
            &format!("[isolation]\nmode = \"{mode}\"\nmax_bytes_without_session = 8388608\n"),
            "isolation.max_bytes_without_session",
        );
        assert!(msg.contains("only applies to mode shared_only"), "{msg}");
        let p = plan(&format!("[isolation]\nmode = \"{mode}\"\n"));
        assert_eq!(p.max_bytes_without_session(), None);
    }
    // Changing it needs a restart.
    let live = plan("[isolation]\nmode = \"shared_only\"\n");
    let new = plan("[isolation]\nmode = \"shared_only\"\nmax_bytes_without_session = 8388608\n");
    assert_eq!(
        live.restart_required(&new),
        vec!["isolation.max_bytes_without_session"]
    );
    assert!(live.restart_required(&live.clone()).is_empty());
}

#[test]
fn fair_share_shares_everything_with_owner_limits() {
    let p = plan(
        "[isolation]\nmode = \"fair_share\"\n[[isolation.stages]]\nstage = \"request_execution\"\nowner_hard_limit = 8\n",
    );
    assert!(p.fair_scheduling());
    let e = p.stage(Stage::RequestExecution);
    assert_eq!((e.total, e.shared, e.owner_limit), (100, 100, 8));
    for s in p.stages() {
        assert_eq!(s.shared, s.total, "{}", s.line());
    }
    assert!(p.rate().bootstrap.is_none());
    let p = plan("[isolation]\nmode = \"fair_share\"\nfair_scheduling = false\n");
    assert!(!p.fair_scheduling());
}

#[test]
fn fair_share_refuses_reserves() {
    refused(
        "[isolation]\nmode = \"fair_share\"\n[[isolation.stages]]\nstage = \"connection\"\nbootstrap_reserved = 1\n",
        "isolation.stages[0].bootstrap_reserved",
    );
    refused(
        "[isolation]\nmode = \"fair_share\"\nbootstrap_reserved_bytes = 4194304\n",
        "isolation.bootstrap_reserved_bytes",
    );
    refused(
        TRUSTED
            .replace("trusted_reservations", "fair_share")
            .as_str(),
        "isolation.trusted_owners",
    );
    // Explicit zeros are fine.
    plan("[isolation]\nmode = \"fair_share\"\n[[isolation.stages]]\nstage = \"request_queue\"\ncontrol_reserved = 0\n");
}

#[test]
fn balanced_reserves_protected_tokens_and_opt_outs_work() {
    let p = plan(
        "[isolation]\n[[isolation.stages]]\nstage = \"reassembly_bytes\"\nbootstrap_reserved = 0\nreconnect_reserved = 0\n[[isolation.stages]]\nstage = \"request_execution\"\ncontrol_reserved = 0\nreconnect_reserved = 3\n",
    );
    let r = p.stage(Stage::ReassemblyBytes);
    assert_eq!((r.bootstrap, r.reconnect, r.shared), (0, 0, r.total));
    let e = p.stage(Stage::RequestExecution);
    assert_eq!(
        (e.bootstrap, e.reconnect, e.control, e.shared),
        (1, 3, 0, 96)
    );
    let rate = p.rate();
    assert!(rate.enabled);
    assert_eq!(
        rate.shared,
        TokenBucketPlan {
            per_second: 498,
            burst: 998
        }
    );
    assert_eq!(
        rate.bootstrap,
        Some(TokenBucketPlan {
            per_second: 1,
            burst: 1
        })
    );
    assert_eq!(
        rate.reconnect,
        Some(TokenBucketPlan {
            per_second: 1,
            burst: 1
        })
    );
}

#[test]
fn trusted_reservations_add_a_reserve_per_owner() {
    // The default one-connection trusted reserve needs another channel.
    let msg = refused(TRUSTED, "server.max_channel_count");
    assert!(msg.contains("at least 104"), "{msg}");
    let p = plan(&format!("[server]\nmax_channel_count = 104\n{TRUSTED}"));
    let c = p.stage(Stage::Connection);
    assert_eq!((c.total, c.shared, c.trusted_reserved()), (104, 101, 1));
    let e = p.stage(Stage::RequestExecution);
    assert_eq!((e.total, e.shared, e.trusted_reserved()), (100, 95, 2));
    let t = e.trusted_for("plant-control").unwrap();
    assert_eq!((t.reserved, t.hard_limit), (2, 8));
    // Omitted stages reserve one operation / one message.
    let q = p.stage(Stage::RequestQueue);
    assert_eq!((q.total, q.shared, q.trusted_reserved()), (104, 100, 1));
    let r = p.stage(Stage::ReassemblyBytes);
    assert_eq!(
        (r.trusted_reserved(), r.shared),
        (FOOTPRINT, 64 * MIB - 3 * FOOTPRINT)
    );
    assert_eq!(
        p.stage(Stage::RequestQueueBytes).trusted_reserved(),
        4 * MIB
    );
    assert_eq!(p.trusted_weight("plant-control"), Some(4));
    assert_eq!(p.trusted_weight("other"), None);
    assert_eq!(p.rate().shared.per_second, 497);
    assert_eq!(p.rate().trusted.len(), 1);
    assert_eq!(p.reserved_owner_entries(), 4);
    // Lines carry the trusted total, never the key.
    assert!(p.lines().iter().all(|l| !l.contains("plant-control")));
    assert!(p.lines()[5].contains("trusted=2"), "{}", p.lines()[5]);
}

#[test]
fn ingress_rules_classify_by_longest_prefix_and_mapped_ipv4() {
    let p = plan(&format!(
        "[server]\nmax_channel_count = 104\n{TRUSTED}[[isolation.ingress]]\ncidr = \"10.0.0.0/8\"\nclass = \"bootstrap\"\n[[isolation.ingress]]\ncidr = \"fd00::/64\"\nclass = \"reconnect\"\n"
    ));
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert_eq!(
        p.classify_ingress(ip("10.0.5.7")),
        Some(&IngressTarget::Owner("plant-control".into()))
    );
    assert_eq!(
        p.classify_ingress(ip("::ffff:10.0.5.7")),
        Some(&IngressTarget::Owner("plant-control".into()))
    );
    assert_eq!(
        p.classify_ingress(ip("10.9.0.1")),
        Some(&IngressTarget::Class(IngressClass::Bootstrap))
    );
    assert_eq!(
        p.classify_ingress(ip("fd00::1")),
        Some(&IngressTarget::Class(IngressClass::Reconnect))
    );
    assert_eq!(p.classify_ingress(ip("192.168.1.1")), None);
}

// ---- Startup validation and sizing: one test per rule ----

#[test]
fn rule_finite_bounds() {
    refused(
        "[server]\nmax_session_count = 0\n",
        "server.max_session_count",
    );
    refused(
        "[server]\nmax_channel_count = 0\n",
        "server.max_channel_count",
    );
    refused(
        "[server]\nchunk_reassembly_budget = 0\n",
        "server.chunk_reassembly_budget",
    );
    let mut c = Config::default();
    c.server.max_message_size = 0;
    assert_eq!(
        Plan::build(&c).unwrap_err().setting(),
        Some("server.max_message_size")
    );
}

#[test]
fn rule_connection_space_after_reservations() {
    refused(
        "[isolation]\n[[isolation.stages]]\nstage = \"connection\"\nreconnect_reserved = 3\n",
        "server.max_channel_count",
    );
    refused(
        "[isolation]\n[[isolation.stages]]\nstage = \"connection\"\ncapacity = 102\n",
        "isolation.stages[0].capacity",
    );
}

#[test]
fn rule_every_stage_can_hold_work() {
    // A capacity override can only lower the total.
    let msg = refused(
        "[isolation]\n[[isolation.stages]]\nstage = \"request_queue\"\ncapacity = 104\n",
        "isolation.stages[0].capacity",
    );
    assert!(msg.contains("103"), "{msg}");
    plan("[isolation]\n[[isolation.stages]]\nstage = \"request_queue\"\ncapacity = 50\n");
    // After reserves the shared part must hold one operation.
    refused(
        "[isolation]\n[[isolation.stages]]\nstage = \"session_establishment\"\ncapacity = 2\n",
        "isolation.stages[0].capacity",
    );
    refused(
        "[server]\nmax_concurrent_session_establishment = 2\n",
        "server.max_concurrent_session_establishment",
    );
    // ... or one retained-message footprint (3 x 4325376 with two reserves).
    refused(
        "[server]\nchunk_reassembly_budget = 12976127\n",
        "server.chunk_reassembly_budget",
    );
    plan("[server]\nchunk_reassembly_budget = 12976128\n");
}

#[test]
fn rule_valid_reserves_and_owner_limits() {
    refused(
        "[isolation]\n[[isolation.stages]]\nstage = \"reassembly_bytes\"\nbootstrap_reserved = 1000\n",
        "isolation.stages[0].bootstrap_reserved",
    );
    refused(
        "[isolation]\n[[isolation.stages]]\nstage = \"request_queue_bytes\"\ncontrol_reserved = 4194303\n",
        "isolation.stages[0].control_reserved",
    );
    refused(
        "[isolation]\n[[isolation.stages]]\nstage = \"connection\"\ncontrol_reserved = 1\n",
        "isolation.stages[0].control_reserved",
    );
    refused(
        "[isolation]\n[[isolation.stages]]\nstage = \"request_execution\"\nowner_hard_limit = 101\n",
        "isolation.stages[0].owner_hard_limit",
    );
    refused(
        "[isolation]\n[[isolation.stages]]\nstage = \"request_execution\"\nowner_hard_limit = 0\n",
        "isolation.stages[0].owner_hard_limit",
    );
    refused(
        "[isolation]\n[[isolation.stages]]\nstage = \"request_execution\"\nreconnect_reserved = 5\nowner_hard_limit = 4\n",
        "isolation.stages[0].owner_hard_limit",
    );
    let base = format!("[server]\nmax_channel_count = 104\n{TRUSTED}");
    refused(
        &base.replace("hard_limit = 8", "hard_limit = 1"),
        "isolation.trusted_owners[0].reservations[0].hard_limit",
    );
    refused(
        &base.replace("hard_limit = 8", "hard_limit = 101"),
        "isolation.trusted_owners[0].reservations[0].hard_limit",
    );
    refused(
        &base.replace(
            "{ stage = \"request_execution\", reserved = 2, hard_limit = 8 }",
            "{ stage = \"reassembly_bytes\", reserved = 100 }",
        ),
        "isolation.trusted_owners[0].reservations[0].reserved",
    );
    refused(
        &base.replace("reserved = 2, hard_limit = 8", "reserved = 97"),
        "server.max_request_thread_count",
    );
    // A zero trusted reserve removes the guarantee.
    let p = plan(&base.replace("reserved = 2", "reserved = 0"));
    assert_eq!(p.stage(Stage::RequestExecution).trusted_reserved(), 0);
}

#[test]
fn rule_retained_message_space() {
    refused(
        "[isolation]\nmax_retained_message_bytes = 4194303\n",
        "isolation.max_retained_message_bytes",
    );
    // max_message_size alone is not an upper bound: chunk headers are charged too.
    let msg = refused(
        "[isolation]\nmax_retained_message_bytes = 4194304\n",
        "isolation.max_retained_message_bytes",
    );
    assert!(
        msg.contains("4325376")
            && msg.contains("(max_chunk_count - 1) x server.max_buffer_size = (67 - 1) x 65536")
            && msg.contains("ceil(server.max_message_size / (server.max_buffer_size - 1024)) + 1"),
        "{msg}"
    );
    refused(
        "[isolation]\nmax_retained_message_bytes = 4325375\n",
        "isolation.max_retained_message_bytes",
    );
    let p = plan("[isolation]\nmax_retained_message_bytes = 4325376\n");
    assert_eq!(p.retained_message_bytes(), FOOTPRINT);
    // The top-level reserves must hold one footprint, not one message.
    refused(
        "[isolation]\nbootstrap_reserved_bytes = 4194304\n",
        "isolation.bootstrap_reserved_bytes",
    );
    refused(
        "[isolation]\nmax_retained_message_bytes = 0\n",
        "isolation.max_retained_message_bytes",
    );
    refused(
        "[isolation]\nbootstrap_reserved_bytes = 0\n",
        "isolation.bootstrap_reserved_bytes",
    );
    refused(
        "[isolation]\nreconnect_reserved_bytes = 1048576\n",
        "isolation.reconnect_reserved_bytes",
    );
    refused(
        "[isolation]\nmax_retained_message_bytes = 33554432\n",
        "server.chunk_reassembly_budget",
    );
}

#[test]
fn rule_bounded_accounting() {
    let msg = refused(
        "[isolation]\nmax_tracked_owners = 3\n",
        "isolation.max_tracked_owners",
    );
    assert!(msg.contains("at least 4"), "{msg}");
    plan("[isolation]\nmax_tracked_owners = 4\n");
    refused(
        "[isolation]\nmax_tracked_owners = 0\n",
        "isolation.max_tracked_owners",
    );
    refused(
        "[isolation]\nmax_owner_key_length = 0\n",
        "isolation.max_owner_key_length",
    );
    refused(
        "[isolation]\ndefault_weight = 0\n",
        "isolation.default_weight",
    );
    let base = format!("[server]\nmax_channel_count = 104\n{TRUSTED}");
    refused(
        &base.replace("weight = 4", "weight = 4\n").replace(
            "mode = \"trusted_reservations\"",
            "mode = \"trusted_reservations\"\nmax_owner_key_length = 5",
        ),
        "isolation.trusted_owners[0].key",
    );
    refused(
        &base.replace(
            "mode = \"trusted_reservations\"",
            "mode = \"trusted_reservations\"\nmax_tracked_owners = 4",
        ),
        "isolation.max_tracked_owners",
    );
}

#[test]
fn rule_valid_profile_entries() {
    refused(
        "[isolation]\n[[isolation.stages]]\nstage = \"connection\"\n[[isolation.stages]]\nstage = \"connection\"\n",
        "isolation.stages[1].stage",
    );
    // Unknown stage and mode names are parse errors.
    assert!(matches!(
        Config::from_toml("[isolation]\n[[isolation.stages]]\nstage = \"sockets\"\n"),
        Err(ConfigError::Parse(_))
    ));
    assert!(matches!(
        Config::from_toml("[isolation]\nmode = \"generous\"\n"),
        Err(ConfigError::Parse(_))
    ));
    let base = format!("[server]\nmax_channel_count = 105\n{TRUSTED}");
    refused(
        &format!("{base}[[isolation.trusted_owners]]\nkey = \"plant-control\"\n"),
        "isolation.trusted_owners[1].key",
    );
    refused(
        &base.replace(
            "reservations = [",
            "reservations = [{ stage = \"request_execution\", reserved = 1 }, ",
        ),
        "isolation.trusted_owners[0].reservations[1].stage",
    );
    refused(
        &TRUSTED.replace("trusted_reservations", "balanced"),
        "isolation.trusted_owners",
    );
    refused(
        "[isolation]\nmode = \"trusted_reservations\"\n",
        "isolation.trusted_owners",
    );
    // Arithmetic overflow names the stage's setting.
    let mut c = Config::default();
    c.isolation.stages.push(uagate_config::StageOverride {
        stage: Stage::RequestQueueBytes,
        capacity: None,
        bootstrap_reserved: Some(u64::MAX / 2),
        reconnect_reserved: Some(u64::MAX / 2),
        control_reserved: Some(u64::MAX / 2),
        owner_hard_limit: None,
    });
    let e = Plan::build(&c).unwrap_err();
    assert_eq!(e.setting(), Some("server.max_message_size"), "{e}");
}

#[test]
fn rule_startup_deadline() {
    refused(
        "[isolation]\nhandshake_timeout = \"0s\"\n",
        "isolation.handshake_timeout",
    );
    refused(
        "[isolation]\nhandshake_timeout = \"121s\"\n",
        "isolation.handshake_timeout",
    );
    refused(
        "[isolation]\nmode = \"shared_only\"\nhandshake_timeout = \"3m\"\n",
        "isolation.handshake_timeout",
    );
    assert_eq!(
        plan("[isolation]\nhandshake_timeout = \"2m\"\n").handshake_timeout(),
        Duration::from_secs(120)
    );
}

#[test]
fn rule_protected_connection_rate() {
    let msg = refused(
        "[server]\nconnections_per_second = 2\n",
        "server.connections_per_second",
    );
    assert!(msg.contains("at least 3"), "{msg}");
    refused(
        "[server]\nconnection_burst = 2\n",
        "server.connection_burst",
    );
    plan("[server]\nconnections_per_second = 3\nconnection_burst = 3\n");
    let base = format!("[server]\nmax_channel_count = 104\nconnections_per_second = 3\n{TRUSTED}");
    let msg = refused(&base, "server.connections_per_second");
    assert!(msg.contains("at least 4"), "{msg}");
    // Profiles without rate reservations keep the plain bucket.
    let p = plan("[server]\nconnections_per_second = 1\nconnection_burst = 1\n[isolation]\nmode = \"fair_share\"\n");
    assert_eq!(
        p.rate().shared,
        TokenBucketPlan {
            per_second: 1,
            burst: 1
        }
    );
    // Both zero disables the limiter; one zero is refused.
    let p = plan("[server]\nconnections_per_second = 0\nconnection_burst = 0\n");
    assert!(!p.rate().enabled);
    refused(
        "[server]\nconnections_per_second = 0\n",
        "server.connections_per_second",
    );
    refused(
        "[server]\nconnection_burst = 0\n",
        "server.connection_burst",
    );
}

#[test]
fn rule_ingress_rules() {
    let base = format!("[server]\nmax_channel_count = 104\n{TRUSTED}");
    refused(
        &base.replace("owner = \"plant-control\"", "owner = \"plant-kontrol\""),
        "isolation.ingress[0].owner",
    );
    refused(
        &base.replace("10.0.5.0/24", "10.0.5.0/33"),
        "isolation.ingress[0].cidr",
    );
    refused(
        &base.replace("10.0.5.0/24", "10.0.5.1/24"),
        "isolation.ingress[0].cidr",
    );
    refused(
        &base.replace("10.0.5.0/24", "ten.0.5.0/24"),
        "isolation.ingress[0].cidr",
    );
    refused(
        &base.replace(
            "owner = \"plant-control\"",
            "owner = \"plant-control\"\nclass = \"bootstrap\"",
        ),
        "isolation.ingress[0]",
    );
    refused(
        &format!("{base}[[isolation.ingress]]\ncidr = \"10.0.5.0/24\"\nclass = \"reconnect\"\n"),
        "isolation.ingress[1].cidr",
    );
    refused(
        "[isolation]\nmode = \"fair_share\"\n[[isolation.ingress]]\ncidr = \"10.0.0.0/8\"\nclass = \"bootstrap\"\n",
        "isolation.ingress[0].class",
    );
    refused(
        "[isolation]\n[[isolation.ingress]]\ncidr = \"10.0.0.0/8\"\nowner = \"anyone\"\n",
        "isolation.ingress[0].owner",
    );
    refused(
        &base.replace("owner = \"plant-control\"", "class = \"bootstrap\""),
        "isolation.ingress",
    );
    refused(
        "[isolation]\n[[isolation.ingress]]\ncidr = \"10.0.0.0/8\"\n",
        "isolation.ingress[0]",
    );
}

#[test]
fn docs_example_plans() {
    let doc = include_str!("../../../docs/config.md");
    let start = doc.find("```toml\n").expect("example present") + 8;
    let end = start + doc[start..].find("```").expect("example closed");
    let p = plan(&doc[start..end]);
    assert_eq!(p.stage(Stage::RequestExecution).owner_limit, 8);
    assert_eq!(p.stage(Stage::Connection).owner_limit, 16);
    assert_eq!(p.handshake_timeout(), Duration::from_secs(30));
    assert_eq!(
        p.classify_ingress("10.0.5.9".parse().unwrap()),
        Some(&IngressTarget::Class(IngressClass::Reconnect))
    );
}
