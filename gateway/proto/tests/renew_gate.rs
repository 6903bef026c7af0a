//! OpenSecureChannel(Renew) work passes the renew gate (the Handshake stage
//! of resource isolation): admitted renewals are processed and end the
//! gate's charge; a refused one closes with BadTcpNotEnoughResources.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::{at, drain, error_status, open_none};
use opcua_types::{SecurityTokenRequestType, StatusCode};
use uagate_proto::{Event, Limits, RenewGate};

/// A gate with `free` slots that counts what is held.
struct Slots {
    free: usize,
    held: Arc<AtomicUsize>,
    begun: Arc<AtomicUsize>,
}

impl RenewGate for Slots {
    fn try_begin(&mut self) -> bool {
        if self.held.load(Ordering::SeqCst) < self.free {
            self.held.fetch_add(1, Ordering::SeqCst);
            self.begun.fetch_add(1, Ordering::SeqCst);
            true
        } else {
            false
        }
    }

    fn end(&mut self) {
        self.held.fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn admitted_renewals_are_processed_and_release_their_slot() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut conn, mut client) = open_none(Limits::default(), dir.path(), now);
    let held = Arc::new(AtomicUsize::new(0));
    let begun = Arc::new(AtomicUsize::new(0));
    conn.set_renew_gate(Box::new(Slots {
        free: 1,
        held: held.clone(),
        begun: begun.clone(),
    }));
    for n in 1..=2 {
        conn.handle_input(
            &client.open(SecurityTokenRequestType::Renew, 600_000),
            at(now, 10 * n),
        );
        let out = drain(&mut conn);
        assert!(
            matches!(out.events.as_slice(), [Event::Renewed { .. }]),
            "{:?}",
            out.events
        );
        assert_eq!(
            held.load(Ordering::SeqCst),
            0,
            "the slot is released after the renewal"
        );
    }
    assert_eq!(begun.load(Ordering::SeqCst), 2);
    assert!(conn.is_open());
}

#[test]
fn a_refused_renewal_closes_with_not_enough_resources() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut conn, mut client) = open_none(Limits::default(), dir.path(), now);
    conn.set_renew_gate(Box::new(Slots {
        free: 0,
        held: Arc::new(AtomicUsize::new(0)),
        begun: Arc::new(AtomicUsize::new(0)),
    }));
    conn.handle_input(
        &client.open(SecurityTokenRequestType::Renew, 600_000),
        at(now, 10),
    );
    let out = drain(&mut conn);
    assert_eq!(
        error_status(&out.frames[0]),
        StatusCode::BadTcpNotEnoughResources
    );
    assert!(conn.is_closed());
}
