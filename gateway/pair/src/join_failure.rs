//! Why joining a pair failed, in words an operator can act on.
//!
//! A join goes wrong in ways the operator at the joining appliance can
//! fix: a mistyped address or code, the other appliance's gateway not
//! running or a firewall between them, a code used or expired, a machine
//! in the middle, two versions that do not speak to each other. The raw
//! causes (an I/O error, a TLS alert, a decoding error, the other
//! appliance's refusal) say that only to someone who knows the protocol.
//! [`JoinFailure::of`] is the one place that maps them: it decides the
//! [`JoinProblem`] and keeps the raw text as the detail, and
//! [`JoinFailure::advice`] says what happened and what to do. The console
//! shows the advice with the detail in small print; the CLI prints both on
//! one line (the failure's `Display`).

use std::fmt;

/// What went wrong in a join, as the operator can act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JoinProblem {
    /// The code typed is not a pairing code (length or characters).
    MalformedCode,
    /// This appliance is in a pair already.
    AlreadyPaired,
    /// What was typed is not `HOST:PORT`.
    BadAddress,
    /// Nothing answered there: refused, unreachable, a name that does not
    /// resolve, or no answer in time.
    Unreachable,
    /// Something answered, but not as a pair listener of this version (a
    /// failed TLS handshake, a closed or garbled answer).
    NotPairListener,
    /// The connection was made but the answer did not come in time.
    NoAnswer,
    /// The other appliance refused the code: wrong, used or expired.
    WrongCode,
    /// This appliance is a member of that pair already.
    AlreadyMember,
    /// That pair has two appliances already.
    PairFull,
    /// That pair has its witness already.
    HasWitness,
    /// The other appliance's answer does not prove the code over the
    /// certificates this appliance saw: a machine in the middle.
    FingerprintMismatch,
    /// The other appliance answered in a form this version does not know.
    VersionsDiffer,
    /// The other appliance is not the leader of its pair.
    NotPrimary,
    /// Anything else (a local failure, an unforeseen refusal).
    Other,
}

/// The raw cause of a failed join, as the join saw it: what
/// [`JoinFailure::of`] maps.
#[derive(Debug)]
pub enum JoinCause<'a> {
    /// The code did not parse.
    Code(&'a str),
    /// This appliance has other members already.
    AlreadyPaired(&'a str),
    /// No TCP connection (or none in time) to the address.
    Connect {
        /// Why, as the system said it.
        error: &'a std::io::Error,
        /// The dial's text (address and error).
        message: &'a str,
    },
    /// A TCP connection, but no TLS session with a certificate.
    Handshake(&'a str),
    /// Sending the request or reading the answer failed (`None`: the
    /// other side closed without an answer).
    Exchange(Option<&'a crate::PairError>),
    /// No answer within the time a join may take.
    Timeout(&'a str),
    /// The other appliance refused, with its reason.
    Refused(&'a str),
    /// An answer that is not one to a join.
    OutOfTurn(&'a str),
    /// The answer does not prove the code.
    Proof(&'a str),
    /// A failure on this appliance after the other one welcomed it.
    Local(&'a crate::PairError),
}

/// A failed join: what went wrong, where, and the raw detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinFailure {
    /// What went wrong.
    pub problem: JoinProblem,
    /// The address typed (`HOST:PORT`).
    pub addr: String,
    /// The raw cause, for the small print and the log.
    pub detail: String,
}

impl JoinFailure {
    /// The one mapping of a join's raw failure to a [`JoinProblem`] (the
    /// raw text kept as the detail). Called by
    /// [`crate::PairNode::join`] for every way a join fails.
    pub fn of(addr: &str, cause: JoinCause<'_>) -> JoinFailure {
        use std::io::ErrorKind as K;
        let (problem, detail) = match cause {
            JoinCause::Code(e) => (JoinProblem::MalformedCode, e.to_string()),
            JoinCause::AlreadyPaired(e) => (JoinProblem::AlreadyPaired, e.to_string()),
            JoinCause::Connect { error, message } => (
                match error.kind() {
                    K::InvalidInput => JoinProblem::BadAddress,
                    _ => JoinProblem::Unreachable,
                },
                message.to_string(),
            ),
            JoinCause::Handshake(e) => (JoinProblem::NotPairListener, e.to_string()),
            JoinCause::Exchange(None) => (
                JoinProblem::NotPairListener,
                format!("{addr} closed the connection without an answer"),
            ),
            JoinCause::Exchange(Some(e)) => (
                match e {
                    crate::PairError::Json(_) => JoinProblem::VersionsDiffer,
                    _ => JoinProblem::NotPairListener,
                },
                e.to_string(),
            ),
            JoinCause::Timeout(e) => (JoinProblem::NoAnswer, e.to_string()),
            JoinCause::Refused(why) => (refusal(why), format!("{addr} refused: {why}")),
            JoinCause::OutOfTurn(e) => (JoinProblem::VersionsDiffer, e.to_string()),
            JoinCause::Proof(e) => (JoinProblem::FingerprintMismatch, e.to_string()),
            JoinCause::Local(e) => (JoinProblem::Other, e.to_string()),
        };
        JoinFailure {
            problem,
            addr: addr.to_string(),
            detail,
        }
    }

    /// What happened and what to do, in plain words (without the raw
    /// detail).
    pub fn advice(&self) -> String {
        let addr = &self.addr;
        match self.problem {
            JoinProblem::MalformedCode => "That is not a pairing code: a code has 20 letters and \
                digits in groups of four (like 7KQ2-M9XD-4HTB-0WRE-5PZC). Copy it again from the \
                other appliance's Pair page (or what `uagate pair invite` printed there)."
                .to_string(),
            JoinProblem::AlreadyPaired => "This appliance is in a pair already. To join another \
                appliance, leave its pair first (Leave the pair… on its Pair page, or `uagate \
                pair leave`)."
                .to_string(),
            JoinProblem::BadAddress => format!(
                "\"{addr}\" is not an address to join: enter the other appliance's pair address \
                 as HOST:PORT (like 10.0.0.1:4850), as its Pair page shows it with the code."
            ),
            JoinProblem::Unreachable => format!(
                "The other appliance cannot be reached at {addr}. Check the address (its Pair \
                 page shows it with the code), that its gateway is running, and that the \
                 network and firewalls let this appliance reach that port."
            ),
            JoinProblem::NotPairListener => format!(
                "Something answers at {addr}, but not as the pair address of a uagate appliance \
                 of this version. Check the port: it is the pair port (4850 unless configured \
                 otherwise), not the console's or OPC UA's. If the address is right, install \
                 the same uagate version on both appliances."
            ),
            JoinProblem::NoAnswer => format!(
                "The other appliance at {addr} took the request but did not answer in time: it \
                 may be busy or restarting. Try again in a minute."
            ),
            JoinProblem::WrongCode => "The other appliance refused the code: it is mistyped, \
                was used already, or has expired (a code works once, for 10 minutes, and five \
                wrong tries cancel it). Press Invite on the other appliance for a new code and \
                enter that one here."
                .to_string(),
            JoinProblem::AlreadyMember => "This appliance is a member of that pair already. If \
                it does not show so here, leave the pair on the primary (this appliance is \
                dropped there), then join again."
                .to_string(),
            JoinProblem::PairFull => "That pair is full: it has two appliances already. An \
                appliance must leave it before another one can join."
                .to_string(),
            JoinProblem::HasWitness => "That pair has a witness already: a pair takes one \
                witness. Remove the other witness (leave the pair on it) first."
                .to_string(),
            JoinProblem::FingerprintMismatch => format!(
                "The answer from {addr} does not prove the code: the certificate this \
                 appliance saw is not the one the code was made for, so another machine may be \
                 between the two appliances. Nothing was paired. Check the address and the \
                 network path, then compare the fingerprint both Pair pages show."
            ),
            JoinProblem::VersionsDiffer => format!(
                "The appliance at {addr} answered in a form this version does not understand: \
                 the two appliances run different uagate versions. Install the same version on \
                 both, then join."
            ),
            JoinProblem::NotPrimary => format!(
                "The appliance at {addr} is not the primary of its pair: enter the primary's \
                 pair address and a code made there."
            ),
            JoinProblem::Other => "The join failed, and nothing was paired. The detail says \
                why; try again, and if it fails again look at both appliances' logs."
                .to_string(),
        }
    }
}

/// The problem behind the other appliance's refusal of a join (its own
/// words, from [`crate::PairNode`]'s welcome).
fn refusal(why: &str) -> JoinProblem {
    let has = |s: &str| why.contains(s);
    if has("pairing code is wrong") || has("code is malformed") {
        JoinProblem::WrongCode
    } else if has("already a member") {
        JoinProblem::AlreadyMember
    } else if has("already has a witness") {
        JoinProblem::HasWitness
    } else if has("pair is full") {
        JoinProblem::PairFull
    } else if has("forward request to") || has("not the configuration leader") {
        JoinProblem::NotPrimary
    } else {
        JoinProblem::Other
    }
}

impl fmt::Display for JoinFailure {
    /// The advice, then the raw detail (the CLI's one line).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (detail: {})", self.advice(), self.detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PairError;

    const ADDR: &str = "10.0.0.1:4850";

    fn of(cause: JoinCause<'_>) -> JoinFailure {
        JoinFailure::of(ADDR, cause)
    }

    #[test]
    fn nothing_listening_is_unreachable_with_what_to_check() {
        let e = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let message = format!("{ADDR}: {e}");
        let f = of(JoinCause::Connect {
            error: &e,
            message: &message,
        });
        assert_eq!(f.problem, JoinProblem::Unreachable);
        assert_eq!(f.detail, message);
        let advice = f.advice();
        assert!(
            advice.contains("cannot be reached at 10.0.0.1:4850"),
            "{advice}"
        );
        assert!(advice.contains("gateway is running"), "{advice}");
        assert!(advice.contains("firewall"), "{advice}");
        // Neither the raw error nor protocol words in the advice.
        assert!(
            !advice.contains("os error") && !advice.contains("TLS"),
            "{advice}"
        );
        // The CLI's line keeps the raw text after it.
        assert!(f.to_string().ends_with(&format!("(detail: {message})")));
    }

    #[test]
    fn a_name_that_does_not_resolve_or_no_answer_in_time_is_unreachable() {
        let e = std::io::Error::other("failed to lookup address information");
        let f = of(JoinCause::Connect {
            error: &e,
            message: "x",
        });
        assert_eq!(f.problem, JoinProblem::Unreachable);
        let e = std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert_eq!(
            of(JoinCause::Connect {
                error: &e,
                message: "x"
            })
            .problem,
            JoinProblem::Unreachable
        );
    }

    #[test]
    fn an_address_without_port_is_a_bad_address() {
        let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, "invalid socket address");
        let f = JoinFailure::of(
            "10.0.0.1",
            JoinCause::Connect {
                error: &e,
                message: "10.0.0.1: invalid socket address",
            },
        );
        assert_eq!(f.problem, JoinProblem::BadAddress);
        assert!(f.advice().contains("HOST:PORT"), "{}", f.advice());
    }

    #[test]
    fn a_tls_failure_or_a_garbled_answer_is_not_a_pair_listener() {
        let f = of(JoinCause::Handshake(
            "10.0.0.1:4850: received corrupt message of type InvalidContentType",
        ));
        assert_eq!(f.problem, JoinProblem::NotPairListener);
        assert!(f.advice().contains("pair port"), "{}", f.advice());
        assert_eq!(
            of(JoinCause::Exchange(None)).problem,
            JoinProblem::NotPairListener
        );
        let io = PairError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "frame size too big",
        ));
        assert_eq!(
            of(JoinCause::Exchange(Some(&io))).problem,
            JoinProblem::NotPairListener
        );
    }

    #[test]
    fn an_answer_this_version_cannot_read_means_versions_differ() {
        let json = PairError::Json(
            serde_json::from_str::<crate::wire::Response>("{\"greeting\":1}").unwrap_err(),
        );
        let f = of(JoinCause::Exchange(Some(&json)));
        assert_eq!(f.problem, JoinProblem::VersionsDiffer);
        assert!(f.advice().contains("same version"), "{}", f.advice());
        assert_eq!(
            of(JoinCause::OutOfTurn("answered out of turn: Left(Ok(()))")).problem,
            JoinProblem::VersionsDiffer
        );
    }

    #[test]
    fn the_other_appliances_refusals() {
        let cases = [
            (
                "the pairing code is wrong, used or expired",
                JoinProblem::WrongCode,
            ),
            (
                "that appliance is already a member of this pair",
                JoinProblem::AlreadyMember,
            ),
            (
                "the pair is full: it has 2 appliances already (a set has at most 2 appliances \
                 and one witness)",
                JoinProblem::PairFull,
            ),
            (
                "this pair already has a witness (a set has at most 2 appliances and one \
                 witness)",
                JoinProblem::HasWitness,
            ),
            (
                "has to forward request to: Some(1), Some(PeerNode { addr: \"x\" })",
                JoinProblem::NotPrimary,
            ),
            ("snapshot file: disk full", JoinProblem::Other),
        ];
        for (why, problem) in cases {
            let f = of(JoinCause::Refused(why));
            assert_eq!(f.problem, problem, "{why}");
            assert_eq!(f.detail, format!("{ADDR} refused: {why}"));
        }
        let advice = of(JoinCause::Refused(cases[0].0)).advice();
        assert!(advice.contains("new code"), "{advice}");
    }

    #[test]
    fn a_code_the_answer_does_not_prove_is_a_fingerprint_mismatch() {
        let f = of(JoinCause::Proof(
            &crate::pairing::PairingError::ProofMismatch.to_string(),
        ));
        assert_eq!(f.problem, JoinProblem::FingerprintMismatch);
        let advice = f.advice();
        assert!(advice.contains("another machine"), "{advice}");
        assert!(advice.contains("compare the fingerprint"), "{advice}");
    }

    #[test]
    fn local_refusals_say_what_to_do() {
        let f = of(JoinCause::Code(
            &crate::pairing::PairingError::MalformedCode.to_string(),
        ));
        assert_eq!(f.problem, JoinProblem::MalformedCode);
        assert!(f.advice().contains("20 letters and digits"));
        let f = of(JoinCause::AlreadyPaired("this appliance is already paired"));
        assert_eq!(f.problem, JoinProblem::AlreadyPaired);
        assert!(f.advice().contains("leave its pair first"));
        assert!(f.advice().contains("uagate pair leave"));
        let f = of(JoinCause::Timeout("10.0.0.1:4850 did not answer"));
        assert_eq!(f.problem, JoinProblem::NoAnswer);
        assert!(f.advice().contains("Try again"));
    }

    #[test]
    fn every_problem_has_advice_without_raw_words() {
        use JoinProblem::*;
        for problem in [
            MalformedCode,
            AlreadyPaired,
            BadAddress,
            Unreachable,
            NotPairListener,
            NoAnswer,
            WrongCode,
            AlreadyMember,
            PairFull,
            HasWitness,
            FingerprintMismatch,
            VersionsDiffer,
            NotPrimary,
            Other,
        ] {
            let f = JoinFailure {
                problem,
                addr: ADDR.into(),
                detail: "raw".into(),
            };
            let advice = f.advice();
            assert!(advice.ends_with('.'), "{problem:?}: {advice}");
            for raw in ["raw", "openraft", "TLS", "os error", "Json", "Err("] {
                assert!(!advice.contains(raw), "{problem:?}: {advice}");
            }
        }
    }
}
