//! The reassembly budget (ReassemblyBytes): intermediate chunks are charged
//! with the bytes they retain before they are kept, a chunk that does not
//! fit ends the connection with BadTcpNotEnoughResources, and every charge
//! is released when the message completes, is aborted or the connection
//! closes. The budget here is a small real pool shared by connections, the
//! connection under test is the real state machine.
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use opcua_core::{Message, RequestMessage};
use opcua_types::{
    BinaryEncodable, ByteString, CloseSecureChannelRequest, ContextOwned, DataValue, NodeId,
    StatusCode, Variant, WriteRequest, WriteValue,
};
use uagate_proto::{CloseReason, Event, Limits, ProtoError, ReassemblyBudget, ServerConnection};

/// A byte pool shared by several connections' budgets, with a log.
#[derive(Debug, Default)]
struct Pool {
    capacity: usize,
    used: usize,
    /// Every successful reserve: (connection, bytes, message_start).
    reserves: Vec<(u32, usize, bool)>,
    /// Every refused reserve: (connection, bytes).
    refusals: Vec<(u32, usize)>,
    /// Every release that gave bytes back: (connection, bytes).
    releases: Vec<(u32, usize)>,
}

/// One connection's budget over a shared [`Pool`].
struct PoolBudget {
    pool: Arc<Mutex<Pool>>,
    id: u32,
    held: usize,
}

impl ReassemblyBudget for PoolBudget {
    fn reserve(&mut self, bytes: usize, message_start: bool) -> bool {
        let mut p = self.pool.lock().unwrap();
        if message_start {
            assert_eq!(self.held, 0, "a new message starts with nothing held");
        }
        if p.used + bytes > p.capacity {
            p.refusals.push((self.id, bytes));
            return false;
        }
        p.used += bytes;
        self.held += bytes;
        p.reserves.push((self.id, bytes, message_start));
        true
    }

    fn release(&mut self) {
        let mut p = self.pool.lock().unwrap();
        if self.held > 0 {
            p.used -= self.held;
            p.releases.push((self.id, self.held));
            self.held = 0;
        }
    }
}

impl Drop for PoolBudget {
    fn drop(&mut self) {
        self.release();
    }
}

fn pool(capacity: usize) -> Arc<Mutex<Pool>> {
    Arc::new(Mutex::new(Pool {
        capacity,
        ..Pool::default()
    }))
}

/// An open None connection whose budget is `id` on `pool`.
fn open_with_budget(
    pool: &Arc<Mutex<Pool>>,
    id: u32,
    dir: &std::path::Path,
    now: Instant,
) -> (ServerConnection, Client) {
    let (mut conn, client) = open_none(Limits::default(), dir, now);
    conn.set_reassembly_budget(Box::new(PoolBudget {
        pool: pool.clone(),
        id,
        held: 0,
    }));
    (conn, client)
}

/// A request of `nodes` reads, encoded into 8192-byte chunks.
fn chunked(client: &mut Client, nodes: usize) -> (u32, RequestMessage, Vec<Vec<u8>>) {
    let req = client.read_request(nodes);
    let (id, frames) = client.encode(&req, 8192);
    (id, req, frames)
}

fn requests(out: &Output) -> Vec<u32> {
    out.events
        .iter()
        .filter_map(|e| match e {
            Event::Request { request_id, .. } => Some(*request_id),
            _ => None,
        })
        .collect()
}

#[test]
fn intermediate_chunks_are_charged_and_released_on_completion() {
    let now = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(1 << 20);
    let (mut conn, mut client) = open_with_budget(&pool, 1, dir.path(), now);
    let (rid, req, frames) = chunked(&mut client, 2000);
    assert!(frames.len() >= 3, "{} chunks", frames.len());
    let (last, intermediate) = frames.split_last().unwrap();
    let mut expected = 0;
    for (i, f) in intermediate.iter().enumerate() {
        assert_eq!(f[3], b'C');
        conn.handle_input(f, now);
        expected += f.len();
        assert_eq!(conn.reassembly_retained(), expected);
        assert_eq!(pool.lock().unwrap().used, expected, "after chunk {i}");
    }
    {
        let p = pool.lock().unwrap();
        // None policy: the retained array is the whole chunk.
        let charged: Vec<_> = p.reserves.iter().map(|&(_, b, s)| (b, s)).collect();
        let want: Vec<_> = intermediate
            .iter()
            .enumerate()
            .map(|(i, f)| (f.len(), i == 0))
            .collect();
        assert_eq!(
            charged, want,
            "one charge per chunk; message start only first"
        );
    }
    assert_eq!(last[3], b'F');
    conn.handle_input(last, now);
    let out = drain(&mut conn);
    match out.events.as_slice() {
        [Event::Request {
            request_id,
            request,
        }] => {
            assert_eq!(*request_id, rid);
            assert_eq!(**request, req);
        }
        other => panic!("expected the request, got {other:?}"),
    }
    let p = pool.lock().unwrap();
    assert_eq!(p.used, 0, "completion releases the message's charge");
    assert_eq!(p.releases, vec![(1, expected)]);
    assert_eq!(
        p.reserves.len(),
        intermediate.len(),
        "the final chunk is not retained and not charged"
    );
    assert_eq!(conn.reassembly_retained(), 0);
}

#[test]
fn single_chunk_messages_are_not_charged() {
    let now = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    // A pool that cannot hold anything: single-chunk traffic still flows.
    let pool = pool(0);
    let (mut conn, mut client) = open_with_budget(&pool, 1, dir.path(), now);
    for _ in 0..3 {
        let (rid, _, frames) = chunked(&mut client, 1);
        assert_eq!(frames.len(), 1);
        conn.handle_input(&frames[0], now);
        assert_eq!(requests(&drain(&mut conn)), vec![rid]);
    }
    let p = pool.lock().unwrap();
    assert!(p.reserves.is_empty() && p.refusals.is_empty(), "{p:?}");
    assert!(conn.is_open());
}

#[test]
fn a_chunk_that_does_not_fit_closes_with_not_enough_resources() {
    let now = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    // Room for two 8192-byte chunks, not three.
    let pool = pool(2 * 8192 + 100);
    let (mut conn, mut client) = open_with_budget(&pool, 1, dir.path(), now);
    let (_, _, frames) = chunked(&mut client, 4000);
    assert!(frames.len() > 4);
    conn.handle_input(&frames[0], now);
    conn.handle_input(&frames[1], now);
    assert!(conn.is_open(), "two chunks fit");
    assert_eq!(pool.lock().unwrap().used, frames[0].len() + frames[1].len());
    conn.handle_input(&frames[2], now);
    let out = assert_failed(&mut conn, StatusCode::BadTcpNotEnoughResources);
    assert!(
        requests(&out).is_empty(),
        "the partial message is discarded"
    );
    let close = out
        .events
        .iter()
        .find_map(|e| match e {
            Event::Closed(CloseReason::Error(e)) => Some(e.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        matches!(
            close,
            ProtoError::ReassemblyBudgetExceeded { requested, retained }
                if requested == frames[2].len() && retained == frames[0].len() + frames[1].len()
        ),
        "{close:?}"
    );
    let p = pool.lock().unwrap();
    assert_eq!(p.refusals, vec![(1, frames[2].len())]);
    assert_eq!(p.used, 0, "closing releases what the message held");
    assert_eq!(conn.reassembly_retained(), 0);
}

#[test]
fn a_shared_pool_refuses_the_second_channel_until_the_first_completes() {
    let now = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(0);
    let (mut a, mut ca) = open_with_budget(&pool, 1, dir.path(), now);
    let (mut b, mut cb) = open_with_budget(&pool, 2, dir.path(), now);
    let (rid_a, _, fa) = chunked(&mut ca, 2000);
    let (_, _, fb) = chunked(&mut cb, 2000);
    let (a_last, a_intermediate) = fa.split_last().unwrap();
    let a_held: usize = a_intermediate.iter().map(Vec::len).sum();
    // Room for A's partial message and one chunk of B, not two.
    pool.lock().unwrap().capacity = a_held + fb[0].len() + 10;
    for f in a_intermediate {
        a.handle_input(f, now);
    }
    b.handle_input(&fb[0], now);
    assert!(b.is_open());
    b.handle_input(&fb[1], now);
    assert_failed(&mut b, StatusCode::BadTcpNotEnoughResources);
    assert_eq!(pool.lock().unwrap().used, a_held, "B's charge is released");
    // A is unaffected and completes its message.
    a.handle_input(a_last, now);
    assert_eq!(requests(&drain(&mut a)), vec![rid_a]);
    assert!(a.is_open());
    assert_eq!(pool.lock().unwrap().used, 0);
    // With the pool free again, a new channel gets a larger message through.
    let (mut c, mut cc) = open_with_budget(&pool, 3, dir.path(), now);
    let (rid_c, _, fc) = chunked(&mut cc, 2000);
    for f in &fc {
        c.handle_input(f, now);
    }
    assert_eq!(requests(&drain(&mut c)), vec![rid_c]);
}

#[test]
fn abort_releases_and_the_next_message_starts_fresh() {
    let now = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(1 << 20);
    let (mut conn, mut client) = open_with_budget(&pool, 1, dir.path(), now);
    let (_, _, mut frames) = chunked(&mut client, 2000);
    let mut last = frames.pop().unwrap();
    for f in &frames {
        conn.handle_input(f, now);
    }
    let held: usize = frames.iter().map(Vec::len).sum();
    assert_eq!(pool.lock().unwrap().used, held);
    last[3] = b'A';
    conn.handle_input(&last, now);
    let out = drain(&mut conn);
    assert!(out.events.is_empty() && out.frames.is_empty());
    assert!(conn.is_open());
    assert_eq!(conn.reassembly_retained(), 0);
    assert_eq!(pool.lock().unwrap().used, 0, "abort releases");
    assert_eq!(pool.lock().unwrap().releases, vec![(1, held)]);
    // The next multi-chunk message is charged again from a message start.
    let (rid, _, next) = chunked(&mut client, 2000);
    let before = pool.lock().unwrap().reserves.len();
    for f in &next {
        conn.handle_input(f, now);
    }
    assert_eq!(requests(&drain(&mut conn)), vec![rid]);
    let p = pool.lock().unwrap();
    assert!(
        p.reserves[before].2,
        "first chunk after the abort starts a message"
    );
    assert!(p.reserves[before + 1..].iter().all(|r| !r.2));
    assert_eq!(p.used, 0);
}

#[test]
fn every_kind_of_close_releases_a_partial_message() {
    let now = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(1 << 20);

    // The client sends CloseSecureChannel in the middle of a message.
    let (mut conn, mut client) = open_with_budget(&pool, 1, dir.path(), now);
    let (_, _, frames) = chunked(&mut client, 2000);
    conn.handle_input(&frames[0], now);
    assert!(pool.lock().unwrap().used > 0);
    let close = RequestMessage::from(CloseSecureChannelRequest {
        request_header: client.header(),
    });
    let (_, clo) = client.encode(&close, 8192);
    assert_eq!(&clo[0][..4], b"CLOF");
    conn.handle_input(&clo[0], now);
    assert!(conn.is_closed());
    assert_eq!(pool.lock().unwrap().used, 0, "CloseSecureChannel releases");

    // The server closes (shutdown).
    let (mut conn, mut client) = open_with_budget(&pool, 2, dir.path(), now);
    let (_, _, frames) = chunked(&mut client, 2000);
    conn.handle_input(&frames[0], now);
    assert!(pool.lock().unwrap().used > 0);
    conn.close(StatusCode::BadServerHalted);
    assert_eq!(pool.lock().unwrap().used, 0, "server close releases");

    // The token expires with a partial message held.
    let (mut conn, mut client) = open_with_budget(&pool, 3, dir.path(), now);
    let (_, _, frames) = chunked(&mut client, 2000);
    conn.handle_input(&frames[0], now);
    assert!(pool.lock().unwrap().used > 0);
    conn.handle_timeout(now + Duration::from_secs(3600));
    assert_failed(&mut conn, StatusCode::BadSecureChannelTokenUnknown);
    assert_eq!(pool.lock().unwrap().used, 0, "a failure releases");

    // A protocol error in the middle of a message (message too large).
    let limits = Limits {
        max_message_size: 12_000,
        ..Limits::default()
    };
    let (mut conn, mut client) = open_none(limits, dir.path(), now);
    conn.set_reassembly_budget(Box::new(PoolBudget {
        pool: pool.clone(),
        id: 4,
        held: 0,
    }));
    let (_, _, frames) = chunked(&mut client, 2000);
    conn.handle_input(&frames[0], now);
    assert!(pool.lock().unwrap().used > 0);
    conn.handle_input(&frames[1], now);
    assert_failed(&mut conn, StatusCode::BadTcpMessageTooLarge);
    assert_eq!(pool.lock().unwrap().used, 0);

    // Dropping the connection drops (and so releases) its budget.
    let (mut conn, mut client) = open_with_budget(&pool, 5, dir.path(), now);
    let (_, _, frames) = chunked(&mut client, 2000);
    conn.handle_input(&frames[0], now);
    assert!(pool.lock().unwrap().used > 0);
    drop(conn);
    assert_eq!(
        pool.lock().unwrap().used,
        0,
        "dropping the connection releases"
    );
}

#[test]
fn a_budget_replaced_mid_message_moves_the_charge() {
    let now = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let first = pool(1 << 20);
    let second = pool(1 << 20);
    let (mut conn, mut client) = open_with_budget(&first, 1, dir.path(), now);
    let (rid, _, frames) = chunked(&mut client, 2000);
    conn.handle_input(&frames[0], now);
    let held = frames[0].len();
    conn.set_reassembly_budget(Box::new(PoolBudget {
        pool: second.clone(),
        id: 2,
        held: 0,
    }));
    assert_eq!(first.lock().unwrap().used, 0);
    assert_eq!(second.lock().unwrap().used, held);
    for f in &frames[1..] {
        conn.handle_input(f, now);
    }
    assert_eq!(requests(&drain(&mut conn)), vec![rid]);
    assert_eq!(second.lock().unwrap().used, 0);

    // A replacement that cannot hold the partial message fails the connection.
    let (_, _, frames) = chunked(&mut client, 2000);
    conn.handle_input(&frames[0], now);
    conn.set_reassembly_budget(Box::new(PoolBudget {
        pool: pool(10),
        id: 3,
        held: 0,
    }));
    assert_failed(&mut conn, StatusCode::BadTcpNotEnoughResources);
    assert_eq!(second.lock().unwrap().used, 0);
}

// ---- The reassembly footprint: what one message can retain ----

/// `uagate_config::Server::max_chunk_count` (the proto crate does not depend
/// on the configuration; the server passes that value in `Limits`).
fn max_chunk_count(max_message_size: u32, max_buffer_size: u32) -> u32 {
    max_message_size.div_ceil(max_buffer_size - 1024) + 1
}

/// The plan's retained-message footprint for `limits`:
/// `(max_chunk_count - 1) x max_buffer_size`.
fn footprint(limits: &Limits) -> usize {
    (limits.max_chunk_count as usize - 1) * limits.receive_buffer_size as usize
}

/// The server's limits for the default `[server]` section (4 MiB messages,
/// 64 KiB buffers, 67 chunks).
fn server_limits() -> Limits {
    let limits = Limits::default();
    Limits {
        max_chunk_count: max_chunk_count(limits.max_message_size, limits.receive_buffer_size),
        ..limits
    }
}

/// A WriteRequest whose type id and body together take exactly `size` bytes.
fn write_of_size(client: &mut Client, size: usize) -> RequestMessage {
    let build = |client: &mut Client, len: usize| -> RequestMessage {
        WriteRequest {
            request_header: client.header(),
            nodes_to_write: Some(vec![WriteValue {
                node_id: NodeId::new(2, "Device0.Blob"),
                attribute_id: 13,
                index_range: Default::default(),
                value: DataValue::new_now(Variant::ByteString(ByteString::from(vec![0x5a; len]))),
            }]),
        }
        .into()
    };
    let encoded_len = |req: &RequestMessage| {
        let ctx = ContextOwned::default();
        let mut v = Vec::new();
        req.type_id().encode(&mut v, &ctx.context()).unwrap();
        req.encode(&mut v, &ctx.context()).unwrap();
        v.len()
    };
    let empty = build(client, 0);
    let base = encoded_len(&empty);
    let req = build(client, size - base);
    assert_eq!(encoded_len(&req), size);
    req
}

/// Bytes the budget was asked to retain, per charge.
fn charged(pool: &Arc<Mutex<Pool>>) -> Vec<usize> {
    pool.lock().unwrap().reserves.iter().map(|r| r.1).collect()
}

#[test]
fn a_maximum_size_message_in_maximum_chunks_stays_within_the_footprint() {
    let now = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let limits = server_limits();
    assert_eq!(limits.max_chunk_count, 67);
    let (m, b) = (
        limits.max_message_size as usize,
        limits.receive_buffer_size as usize,
    );
    assert_eq!(footprint(&limits), 66 * 65536);
    let (mut conn, mut client) = open_none(limits.clone(), dir.path(), now);
    let pool = pool(1 << 30);
    conn.set_reassembly_budget(Box::new(PoolBudget {
        pool: pool.clone(),
        id: 1,
        held: 0,
    }));
    // A message of exactly max_message_size bytes in full receive buffers.
    let req = write_of_size(&mut client, m);
    let (rid, frames) = client.encode(&req, b);
    assert!(frames.len() <= limits.max_chunk_count as usize);
    let (last, intermediate) = frames.split_last().unwrap();
    assert!(intermediate.iter().all(|f| f.len() == b && f[3] == b'C'));
    for f in intermediate {
        conn.handle_input(f, now);
    }
    assert!(conn.is_open());
    let charges = charged(&pool);
    assert_eq!(charges.len(), intermediate.len());
    let total: usize = charges.iter().sum();
    // Headers are charged too: more than the bodies alone ...
    let bodies: usize = intermediate.iter().map(|f| f.len() - 24).sum();
    assert!(total > bodies, "{total} vs {bodies}");
    // ... yet within the footprint, and the footprint is not loose by more
    // than one buffer plus the per-chunk allowance.
    assert!(
        total <= footprint(&limits),
        "{total} > {}",
        footprint(&limits)
    );
    assert!(total > m - b, "{total} <= {}", m - b);
    assert_eq!(pool.lock().unwrap().used, total);
    conn.handle_input(last, now);
    let out = drain(&mut conn);
    match out.events.as_slice() {
        [Event::Request {
            request_id,
            request,
        }] => {
            assert_eq!(*request_id, rid);
            assert_eq!(**request, req);
        }
        other => panic!("expected the request, got {other:?}"),
    }
    assert_eq!(pool.lock().unwrap().used, 0);
}

#[test]
fn max_chunk_count_intermediate_chunks_stay_within_the_footprint() {
    // The worst a message can retain: the reassembler refuses only the
    // chunk after max_chunk_count, so an incomplete message may hold
    // max_chunk_count intermediate chunks whose bodies fill max_message_size.
    let now = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let limits = server_limits();
    let n = limits.max_chunk_count as usize;
    let m = limits.max_message_size as usize;
    let b = limits.receive_buffer_size as usize;
    let (mut conn, mut client) = open_none(limits.clone(), dir.path(), now);
    let pool = pool(1 << 30);
    conn.set_reassembly_budget(Box::new(PoolBudget {
        pool: pool.clone(),
        id: 1,
        held: 0,
    }));
    // Chunks of (m / n) body bytes each; the message is a little longer, so
    // the (n + 1)-th chunk is its final one.
    let body = m / n;
    let req = write_of_size(&mut client, n * body + 100);
    let (_, frames) = client.encode(&req, body + 24);
    assert_eq!(frames.len(), n + 1);
    for f in &frames[..n] {
        assert_eq!(f[3], b'C');
        assert!(f.len() <= b);
        conn.handle_input(f, now);
    }
    assert!(
        conn.is_open(),
        "max_chunk_count intermediate chunks are held"
    );
    let charges = charged(&pool);
    assert_eq!(charges.len(), n);
    let total: usize = charges.iter().sum();
    assert_eq!(total, n * (body + 24));
    assert!(
        total <= footprint(&limits),
        "{total} > {}",
        footprint(&limits)
    );
    assert!(total > m - b);
    // The final chunk would be one too many: refused, everything released.
    conn.handle_input(&frames[n], now);
    assert_failed(&mut conn, StatusCode::BadTcpMessageTooLarge);
    assert_eq!(pool.lock().unwrap().used, 0);
}
