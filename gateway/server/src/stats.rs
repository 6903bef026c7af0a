//! Request and connection statistics for the metrics endpoint: requests
//! per service and status, a latency histogram per service, and
//! connections and secure channels per transport. Recorded on the request
//! path with atomics only (a lock is taken for non-Good answers alone), and
//! read by a scrape as a snapshot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use opcua_core::RequestMessage;
use opcua_types::StatusCode;
use parking_lot::Mutex;

/// Upper bounds (seconds) of the request latency buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// The service labels, in index order; `other` for anything else.
pub const SERVICES: [&str; 31] = [
    "GetEndpoints",
    "FindServers",
    "CreateSession",
    "ActivateSession",
    "CloseSession",
    "Cancel",
    "Browse",
    "BrowseNext",
    "TranslateBrowsePathsToNodeIds",
    "RegisterNodes",
    "UnregisterNodes",
    "Read",
    "Write",
    "HistoryRead",
    "Call",
    "CreateSubscription",
    "ModifySubscription",
    "SetPublishingMode",
    "DeleteSubscriptions",
    "Republish",
    "TransferSubscriptions",
    "CreateMonitoredItems",
    "ModifyMonitoredItems",
    "DeleteMonitoredItems",
    "SetMonitoringMode",
    "SetTriggering",
    "Publish",
    "HistoryUpdate",
    "QueryFirst",
    "AddNodes",
    "other",
];

/// The transports, in index order.
pub const TRANSPORTS: [&str; 3] = ["opc.tcp", "opc.wss", "opc.https"];

/// The position of `name` in [`SERVICES`] (`other` when absent);
/// evaluated at compile time for each arm of [`service_index`].
const fn index_of(name: &str) -> usize {
    let mut i = 0;
    while i < SERVICES.len() {
        let (a, b) = (SERVICES[i].as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut k = 0;
            while k < a.len() && a[k] == b[k] {
                k += 1;
            }
            if k == a.len() {
                return i;
            }
        }
        i += 1;
    }
    SERVICES.len() - 1
}

/// The index in [`SERVICES`] of a request (called for every request).
pub fn service_index(r: &RequestMessage) -> usize {
    use RequestMessage as M;
    match r {
        M::GetEndpoints(_) => const { index_of("GetEndpoints") },
        M::FindServers(_) => const { index_of("FindServers") },
        M::CreateSession(_) => const { index_of("CreateSession") },
        M::ActivateSession(_) => const { index_of("ActivateSession") },
        M::CloseSession(_) => const { index_of("CloseSession") },
        M::Cancel(_) => const { index_of("Cancel") },
        M::Browse(_) => const { index_of("Browse") },
        M::BrowseNext(_) => const { index_of("BrowseNext") },
        M::TranslateBrowsePathsToNodeIds(_) => const { index_of("TranslateBrowsePathsToNodeIds") },
        M::RegisterNodes(_) => const { index_of("RegisterNodes") },
        M::UnregisterNodes(_) => const { index_of("UnregisterNodes") },
        M::Read(_) => const { index_of("Read") },
        M::Write(_) => const { index_of("Write") },
        M::HistoryRead(_) => const { index_of("HistoryRead") },
        M::Call(_) => const { index_of("Call") },
        M::CreateSubscription(_) => const { index_of("CreateSubscription") },
        M::ModifySubscription(_) => const { index_of("ModifySubscription") },
        M::SetPublishingMode(_) => const { index_of("SetPublishingMode") },
        M::DeleteSubscriptions(_) => const { index_of("DeleteSubscriptions") },
        M::Republish(_) => const { index_of("Republish") },
        M::TransferSubscriptions(_) => const { index_of("TransferSubscriptions") },
        M::CreateMonitoredItems(_) => const { index_of("CreateMonitoredItems") },
        M::ModifyMonitoredItems(_) => const { index_of("ModifyMonitoredItems") },
        M::DeleteMonitoredItems(_) => const { index_of("DeleteMonitoredItems") },
        M::SetMonitoringMode(_) => const { index_of("SetMonitoringMode") },
        M::SetTriggering(_) => const { index_of("SetTriggering") },
        M::Publish(_) => const { index_of("Publish") },
        M::HistoryUpdate(_) => const { index_of("HistoryUpdate") },
        M::QueryFirst(_) => const { index_of("QueryFirst") },
        M::AddNodes(_) => const { index_of("AddNodes") },
        _ => SERVICES.len() - 1,
    }
}

/// The index in [`TRANSPORTS`] of a URL scheme.
pub fn transport_index(scheme: &str) -> usize {
    TRANSPORTS.iter().position(|t| *t == scheme).unwrap_or(0)
}

/// Latency histogram of one service.
#[derive(Default)]
struct Latency {
    /// Per bucket of [`LATENCY_BUCKETS`] (not cumulative), plus overflow.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

/// The engine's counters.
#[derive(Default)]
pub struct Stats {
    latency: [Latency; SERVICES.len()],
    /// Non-Good answers per (service, status code); Good ones are the
    /// histogram count minus these.
    not_good: Mutex<HashMap<(usize, u32), u64>>,
    connections: [AtomicI64; TRANSPORTS.len()],
    channels: [AtomicI64; TRANSPORTS.len()],
    /// Recent mean latency of an answer in ns (moving average over about
    /// the last 16 answers): the BadServerTooBusy retry hint's unit of work.
    recent_ns: AtomicU64,
    /// Notifications (data changes and events) sent in Publish responses.
    notifications: AtomicU64,
}

/// What the answers count for ServerDiagnosticsSummary (Part 5 12.9):
/// rejected requests and session establishments (CreateSession and
/// ActivateSession), those of them rejected for security reasons, and the
/// sessions and subscriptions created. Since start.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AnswerCounts {
    /// Requests of any service answered with a Bad service result.
    pub rejected_requests: u64,
    /// Of them, rejected for security reasons (see [`is_security_rejection`]).
    pub security_rejected_requests: u64,
    /// CreateSession and ActivateSession answered Bad.
    pub rejected_sessions: u64,
    /// Of them, rejected for security reasons.
    pub security_rejected_sessions: u64,
    /// CreateSession answered Good.
    pub sessions_created: u64,
    /// CreateSubscription answered Good.
    pub subscriptions_created: u64,
}

/// Whether a Bad service result is a refusal for security reasons: the
/// caller's certificate, signature, identity or rights.
pub fn is_security_rejection(status: StatusCode) -> bool {
    const SECURITY: [StatusCode; 18] = [
        StatusCode::BadSecurityChecksFailed,
        StatusCode::BadUserAccessDenied,
        StatusCode::BadIdentityTokenInvalid,
        StatusCode::BadIdentityTokenRejected,
        StatusCode::BadCertificateInvalid,
        StatusCode::BadCertificateUntrusted,
        StatusCode::BadCertificateTimeInvalid,
        StatusCode::BadCertificateUriInvalid,
        StatusCode::BadCertificateRevoked,
        StatusCode::BadCertificateIssuerRevoked,
        StatusCode::BadCertificateRevocationUnknown,
        StatusCode::BadCertificateHostNameInvalid,
        StatusCode::BadCertificateUseNotAllowed,
        StatusCode::BadApplicationSignatureInvalid,
        StatusCode::BadUserSignatureInvalid,
        StatusCode::BadSecurityPolicyRejected,
        StatusCode::BadSecurityModeInsufficient,
        StatusCode::BadNonceInvalid,
    ];
    SECURITY.contains(&StatusCode::from(status.bits() & 0xFFFF_0000))
}

/// A snapshot of one service's answers.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceStats {
    /// The service label.
    pub service: &'static str,
    /// (status name, count), Good included.
    pub by_status: Vec<(&'static str, u64)>,
    /// Cumulative counts per bucket of [`LATENCY_BUCKETS`].
    pub cumulative: Vec<u64>,
    /// Answers timed.
    pub count: u64,
    /// Sum of their latencies, seconds.
    pub sum_s: f64,
}

impl Stats {
    /// Records one answered request; called for every answer the engine
    /// produces at once (a Publish answered later is not recorded).
    pub fn observe(&self, service: usize, status: StatusCode, took: Duration) {
        let Some(l) = self.latency.get(service) else {
            return;
        };
        let secs = took.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        l.buckets[i].fetch_add(1, Ordering::Relaxed);
        l.count.fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        l.sum_ns.fetch_add(ns, Ordering::Relaxed);
        // A racy update loses at most one sample of a moving average.
        let old = self.recent_ns.load(Ordering::Relaxed);
        let new = if old == 0 {
            ns
        } else {
            old - old / 16 + ns / 16
        };
        self.recent_ns.store(new, Ordering::Relaxed);
        if !status.is_good() {
            *self
                .not_good
                .lock()
                .entry((service, status.bits() & 0xFFFF_0000))
                .or_insert(0) += 1;
        }
    }

    /// The counts of ServerDiagnosticsSummary that the answers give;
    /// called once a second by the housekeeping task.
    pub fn answer_counts(&self) -> AnswerCounts {
        const CREATE: usize = index_of("CreateSession");
        const ACTIVATE: usize = index_of("ActivateSession");
        const CREATE_SUBSCRIPTION: usize = index_of("CreateSubscription");
        let mut a = AnswerCounts::default();
        let mut not_good_of = [0u64; SERVICES.len()];
        for (&(service, code), &n) in self.not_good.lock().iter() {
            if let Some(count) = not_good_of.get_mut(service) {
                *count += n;
            }
            let status = StatusCode::from(code);
            if !status.is_bad() {
                continue;
            }
            let security = is_security_rejection(status);
            a.rejected_requests += n;
            if security {
                a.security_rejected_requests += n;
            }
            if service == CREATE || service == ACTIVATE {
                a.rejected_sessions += n;
                if security {
                    a.security_rejected_sessions += n;
                }
            }
        }
        let good = |service: usize| {
            self.latency[service]
                .count
                .load(Ordering::Relaxed)
                .saturating_sub(not_good_of[service])
        };
        a.sessions_created = good(CREATE);
        a.subscriptions_created = good(CREATE_SUBSCRIPTION);
        a
    }

    /// The recent mean time to answer a request (zero before the first).
    pub fn recent_latency(&self) -> Duration {
        Duration::from_nanos(self.recent_ns.load(Ordering::Relaxed))
    }

    /// A connection of `transport` opened (`+1`) or closed (`-1`).
    pub fn connection(&self, transport: &str, delta: i64) {
        self.connections[transport_index(transport)].fetch_add(delta, Ordering::Relaxed);
    }

    /// A secure channel over `transport` opened (`+1`) or closed (`-1`).
    pub fn channel(&self, transport: &str, delta: i64) {
        self.channels[transport_index(transport)].fetch_add(delta, Ordering::Relaxed);
    }

    /// Open connections and channels per transport: (transport, connections, channels).
    pub fn transports(&self) -> Vec<(&'static str, i64, i64)> {
        TRANSPORTS
            .iter()
            .enumerate()
            .map(|(i, t)| {
                (
                    *t,
                    self.connections[i].load(Ordering::Relaxed),
                    self.channels[i].load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    /// Counts `n` notifications sent in a Publish response.
    pub fn count_notifications(&self, n: u64) {
        self.notifications.fetch_add(n, Ordering::Relaxed);
    }

    /// Notifications sent since start.
    pub fn notifications(&self) -> u64 {
        self.notifications.load(Ordering::Relaxed)
    }

    /// Answers of the service `name` (one of [`SERVICES`]) since start.
    pub fn answered(&self, name: &str) -> u64 {
        SERVICES
            .iter()
            .position(|s| *s == name)
            .map_or(0, |i| self.latency[i].count.load(Ordering::Relaxed))
    }

    /// Every service that answered at least once.
    pub fn services(&self) -> Vec<ServiceStats> {
        let not_good = self.not_good.lock().clone();
        SERVICES
            .iter()
            .enumerate()
            .filter_map(|(i, name)| {
                let l = &self.latency[i];
                let count = l.count.load(Ordering::Relaxed);
                if count == 0 {
                    return None;
                }
                let mut running = 0;
                let cumulative = l.buckets[..LATENCY_BUCKETS.len()]
                    .iter()
                    .map(|b| {
                        running += b.load(Ordering::Relaxed);
                        running
                    })
                    .collect();
                let mut by_status: Vec<(&'static str, u64)> = not_good
                    .iter()
                    .filter(|((s, _), _)| *s == i)
                    .map(|((_, code), n)| (StatusCode::from(*code).sub_code().name(), *n))
                    .collect();
                let bad: u64 = by_status.iter().map(|(_, n)| n).sum();
                by_status.push(("Good", count.saturating_sub(bad)));
                by_status.sort();
                Some(ServiceStats {
                    service: name,
                    by_status,
                    cumulative,
                    count,
                    sum_s: l.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
                })
            })
            .collect()
    }
}

/// Counts one open connection or channel of a transport while it lives.
pub(crate) struct OpenCount {
    engine: std::sync::Arc<crate::Engine>,
    transport: &'static str,
    channel: bool,
}

impl OpenCount {
    /// A connection (`channel == false`) or secure channel now open.
    pub(crate) fn new(
        engine: std::sync::Arc<crate::Engine>,
        transport: &'static str,
        channel: bool,
    ) -> OpenCount {
        if channel {
            engine.pipeline.stats().channel(transport, 1);
        } else {
            engine.pipeline.stats().connection(transport, 1);
        }
        OpenCount {
            engine,
            transport,
            channel,
        }
    }
}

impl Drop for OpenCount {
    fn drop(&mut self) {
        if self.channel {
            self.engine.pipeline.stats().channel(self.transport, -1);
        } else {
            self.engine.pipeline.stats().connection(self.transport, -1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_counted_by_service_status_and_latency() {
        for (i, name) in SERVICES.iter().enumerate() {
            assert_eq!(index_of(name), i, "{name}");
        }
        let s = Stats::default();
        let read = SERVICES.iter().position(|n| *n == "Read").unwrap();
        s.observe(read, StatusCode::Good, Duration::from_micros(300));
        s.observe(read, StatusCode::Good, Duration::from_millis(3));
        s.observe(
            read,
            StatusCode::BadSessionIdInvalid,
            Duration::from_secs(9),
        );
        let all = s.services();
        assert_eq!(all.len(), 1);
        let r = &all[0];
        assert_eq!(r.service, "Read");
        assert_eq!(r.count, 3);
        assert_eq!(r.by_status, vec![("BadSessionIdInvalid", 1), ("Good", 2)]);
        // 0.3 ms in the first bucket, 3 ms by the 5 ms bucket, 9 s beyond all.
        assert_eq!(r.cumulative[0], 1);
        assert_eq!(r.cumulative[3], 2);
        assert_eq!(*r.cumulative.last().unwrap(), 2);
        assert!((r.sum_s - 9.0033).abs() < 1e-6);
        s.connection("opc.wss", 1);
        s.channel("opc.wss", 1);
        s.channel("opc.wss", -1);
        assert_eq!(s.transports()[1], ("opc.wss", 1, 0));
    }

    /// ServerDiagnosticsSummary's counts: rejections are Bad service
    /// results (Uncertain ones are not), sessions those of CreateSession
    /// and ActivateSession, security ones those of the caller's identity
    /// or rights; created sessions and subscriptions are the Good answers.
    #[test]
    fn answer_counts_for_the_diagnostics_summary() {
        let s = Stats::default();
        let ms = Duration::from_millis(1);
        let (create, activate, read, sub) = (
            index_of("CreateSession"),
            index_of("ActivateSession"),
            index_of("Read"),
            index_of("CreateSubscription"),
        );
        s.observe(create, StatusCode::Good, ms);
        s.observe(create, StatusCode::Good, ms);
        s.observe(create, StatusCode::BadTooManySessions, ms);
        s.observe(activate, StatusCode::BadUserAccessDenied, ms);
        s.observe(activate, StatusCode::Good, ms);
        s.observe(read, StatusCode::BadTooManyOperations, ms);
        s.observe(read, StatusCode::UncertainLastUsableValue, ms);
        s.observe(sub, StatusCode::Good, ms);
        assert_eq!(
            s.answer_counts(),
            AnswerCounts {
                rejected_requests: 3,
                security_rejected_requests: 1,
                rejected_sessions: 2,
                security_rejected_sessions: 1,
                sessions_created: 2,
                subscriptions_created: 1,
            }
        );
        assert!(is_security_rejection(StatusCode::BadCertificateUntrusted));
        assert!(!is_security_rejection(StatusCode::BadNodeIdUnknown));
    }
}
