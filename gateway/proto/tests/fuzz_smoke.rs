//! The fuzz targets of `fuzz/` run as a bounded, deterministic loop on stable:
//! 20 000 pseudo-random inputs (fixed seed) per target, half of them
//! mutations of valid traffic so that they get past the first checks.
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use common::fuzz_harness::{secure_channel_input, seed_streams, uacp_framing};
use common::mutate::{input, Rng};

const ITERATIONS: usize = 20_000;

#[test]
fn uacp_framing_smoke() {
    let (prefix, rest) = seed_streams();
    let mut seed = vec![0xff, 0x3f]; // limit 16383 + 8
    seed.extend_from_slice(prefix);
    seed.extend_from_slice(rest);
    let mut rng = Rng(0x5eed_0001);
    for _ in 0..ITERATIONS {
        uacp_framing(&input(&mut rng, &seed));
    }
}

#[test]
fn secure_channel_input_after_handshake_smoke() {
    let (_, rest) = seed_streams();
    let mut rng = Rng(0x5eed_0002);
    for _ in 0..ITERATIONS {
        secure_channel_input(&input(&mut rng, rest), true);
    }
}

#[test]
fn secure_channel_input_without_prefix_smoke() {
    let (prefix, rest) = seed_streams();
    let mut seed = prefix.clone();
    seed.extend_from_slice(rest);
    let mut rng = Rng(0x5eed_0003);
    for _ in 0..ITERATIONS {
        secure_channel_input(&input(&mut rng, &seed), false);
    }
}

#[test]
fn seeds_are_valid_traffic() {
    // Guard: unmutated seeds must go all the way through (open, two reads,
    // renew, close), otherwise the smoke loops above test little.
    use std::time::Instant;
    use uagate_proto::{CloseReason, Event, ServerConnection};
    let (prefix, rest) = seed_streams();
    let now = Instant::now();
    let mut conn = ServerConnection::new(
        common::fuzz_harness::fuzz_limits(),
        common::fuzz_harness::none_server_channel(),
        now,
        opcua_types::DateTime::now(),
    );
    conn.handle_input(prefix, now);
    assert!(matches!(conn.poll_event(), Some(Event::OpenRequested(_))));
    conn.accept_open(common::fuzz_harness::CHANNEL_ID, now);
    conn.handle_input(rest, now);
    let mut events = Vec::new();
    while let Some(e) = conn.poll_event() {
        events.push(e);
    }
    assert_eq!(events.len(), 4, "{events:?}");
    assert!(matches!(events[0], Event::Request { .. }));
    assert!(matches!(events[1], Event::Request { .. }));
    assert!(matches!(events[2], Event::Renewed { .. }));
    assert!(matches!(
        events[3],
        Event::Closed(CloseReason::ClientClosed)
    ));
}

/// Runs of `secure_channel_policies` per policy/mode and way: each run is
/// a full handshake with RSA, so far fewer than the other loops.
const POLICY_RUNS: usize = 3;

#[test]
fn secure_channel_policies_smoke() {
    use common::fuzz_harness::{sealed_seed_bodies, secure_channel_policies, POLICIES, SEALED};
    let bodies = sealed_seed_bodies();
    let (_, raw) = seed_streams();
    let mut rng = Rng(0x5eed_0004);
    for pick in 0..POLICIES.len() as u8 {
        for _ in 0..POLICY_RUNS {
            // Sealed: a mutated request body, correctly secured.
            let body = &bodies[rng.below(bodies.len())];
            let mut data = vec![pick | SEALED];
            data.extend(input(&mut rng, body));
            secure_channel_policies(&data);
            // Raw: forged frames after the handshake.
            let mut data = vec![pick];
            data.extend(input(&mut rng, raw));
            secure_channel_policies(&data);
        }
    }
}

#[test]
fn sealed_seeds_reach_the_engine_on_every_policy() {
    // Guard: an unmutated sealed body must come out as a request, or the
    // sealed half of the target never gets past the crypto.
    use common::fuzz_harness::{fuzz_limits, open_secured, sealed_seed_bodies, POLICIES};
    use std::time::Instant;
    use uagate_proto::Event;
    let read = &sealed_seed_bodies()[0];
    for (policy, mode) in POLICIES {
        let now = Instant::now();
        let (mut conn, mut client) = open_secured(policy, mode, &fuzz_limits(), now);
        conn.handle_input(&client.seal(read), now);
        assert!(
            matches!(conn.poll_event(), Some(Event::Request { .. })),
            "{policy:?}/{mode:?}"
        );
        // Long bodies travel as several sealed chunks.
        let mut long = read.clone();
        long.resize(10_000, 0);
        conn.handle_input(&client.seal(&long), now);
        let ev = conn.poll_event();
        assert!(
            !matches!(
                ev,
                Some(Event::Closed(uagate_proto::CloseReason::Error(ref e)))
                    if e.status() == opcua_types::StatusCode::BadSecurityChecksFailed
            ),
            "{policy:?}/{mode:?}: {ev:?}"
        );
    }
}

/// Writes the seed corpora of the three proto targets to `fuzz/seeds/`
/// when `UAGATE_WRITE_SEEDS` is set (run once after changing the seeds).
#[test]
fn write_seeds() {
    use common::fuzz_harness::{fuzz_limits, open_secured, sealed_seed_bodies, POLICIES, SEALED};
    if std::env::var_os("UAGATE_WRITE_SEEDS").is_none() {
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds/secure_channel_policies");
    std::fs::create_dir_all(&dir).unwrap();
    let bodies = sealed_seed_bodies();
    for (i, (policy, mode)) in POLICIES.iter().enumerate() {
        let name = format!("{policy:?}-{mode:?}");
        // Sealed: the body of a Read.
        let mut sealed = vec![i as u8 | SEALED];
        sealed.extend_from_slice(&bodies[0]);
        std::fs::write(dir.join(format!("{name}-sealed.bin")), sealed).unwrap();
        // Raw: a Read sealed by another handshake's keys (well formed,
        // but its signature cannot verify).
        let (_, mut client) =
            open_secured(*policy, *mode, &fuzz_limits(), std::time::Instant::now());
        let mut raw = vec![i as u8];
        raw.extend(client.seal(&bodies[0]));
        std::fs::write(dir.join(format!("{name}-raw.bin")), raw).unwrap();
    }
    // The smoke loops' seeds for the other two targets.
    let (prefix, rest) = seed_streams();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    let mut framing = vec![0xff, 0x3f];
    framing.extend_from_slice(prefix);
    framing.extend_from_slice(rest);
    // secure_channel_input: first byte even, the harness makes the
    // handshake; odd, the input carries it.
    let mut after = vec![0u8];
    after.extend_from_slice(rest);
    let mut whole = vec![1u8];
    whole.extend_from_slice(prefix);
    whole.extend_from_slice(rest);
    for (target, name, data) in [
        ("uacp_framing", "handshake-reads-renew-close", framing),
        ("secure_channel_input", "after-handshake", after),
        ("secure_channel_input", "with-handshake", whole),
    ] {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), data).unwrap();
    }
}
