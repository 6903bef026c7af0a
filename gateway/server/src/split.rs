//! Stage two of every service over the aggregated address space: a checked
//! request's operations are grouped by backend (the local space, each
//! mount), the backends run concurrently, and their results and
//! diagnostics are put back in request order. Every routed service goes
//! through [`Split::run`]; none has its own split/merge code.
//!
//! Plain data and futures: no sockets, no field connection types. The
//! caller hands in one future for the local part and a function that runs
//! one mount's operations, so the merge is unit-tested on its own.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Instant;

use futures_util::future::{join, join_all};
use opcua_types::StatusCode;
use uagate_field::diag::Diagnostics;
use uagate_field::proxy::Answer;

/// Where one operation of a request runs. Decided per operation by the
/// service before anything runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// The local space answers it.
    Local,
    /// The field server of this mount answers it.
    Mount(usize),
    /// The local space and the mount's field server both answer it, and
    /// the two answers are joined ([`OpResult::join`]): a Browse of a
    /// mount folder shows its local references, then the field server's.
    Both(usize),
    /// No backend runs it: its result is this status (a request-wide
    /// decision such as "the caller may not write").
    Answered(StatusCode),
}

/// The per-operation result of a routed service, as the merge builds it.
pub(crate) trait OpResult: Sized {
    /// A result that carries only `status`.
    fn with_status(status: StatusCode) -> Self;

    /// The result of an operation whose mount could not answer; `status`
    /// says why (not connected, timed out, or a refusal of the whole
    /// southbound call). Most services report `BadServerNotConnected`.
    fn unreachable(_status: StatusCode) -> Self {
        Self::with_status(StatusCode::BadServerNotConnected)
    }

    /// Adds the mount's answer to the local result of the same operation
    /// ([`Route::Both`]). By default the mount's answer replaces it.
    fn join(&mut self, field: Result<Self, StatusCode>) {
        *self = field.unwrap_or_else(Self::unreachable);
    }
}

/// A request's operations grouped by backend, in request order within
/// each group. Built once per request by [`Split::new`].
#[derive(Debug, Default)]
pub(crate) struct Split {
    n: usize,
    local: Vec<usize>,
    mounts: Vec<(usize, Vec<usize>)>,
    both: Vec<usize>,
    answered: Vec<(usize, StatusCode)>,
}

impl Split {
    /// Groups the `n` operations of a request by `route(i)`.
    pub(crate) fn new(n: usize, mut route: impl FnMut(usize) -> Route) -> Split {
        let mut split = Split {
            n,
            ..Split::default()
        };
        let mut mounts: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for i in 0..n {
            match route(i) {
                Route::Local => split.local.push(i),
                Route::Mount(m) => mounts.entry(m).or_default().push(i),
                Route::Both(m) => {
                    split.local.push(i);
                    split.both.push(i);
                    mounts.entry(m).or_default().push(i);
                }
                Route::Answered(st) => split.answered.push((i, st)),
            }
        }
        split.mounts = mounts.into_iter().collect();
        split
    }

    /// The operations the local space answers, in request order; the
    /// local future of [`Split::run`] returns one result for each.
    pub(crate) fn local(&self) -> &[usize] {
        &self.local
    }

    /// Whether the local space answers every operation (nothing to merge).
    fn all_local(&self) -> bool {
        self.local.len() == self.n && self.mounts.is_empty()
    }

    /// Whether one mount answers every operation, in request order.
    fn one_mount(&self) -> bool {
        self.local.is_empty()
            && self.answered.is_empty()
            && matches!(self.mounts.as_slice(), [(_, idx)] if idx.len() == self.n)
    }

    /// Runs the request: the `local` future (results for [`Split::local`])
    /// and `mount(m, indexes)` for every mount, all concurrently; each
    /// mount is bounded by `deadline` (after which its operations get
    /// [`OpResult::unreachable`] with `BadTimeout`). Returns the results and
    /// diagnostics in request order. An error of the local part (such as a
    /// session closed meanwhile) fails the whole request.
    pub(crate) async fn run<R, E, LF, MF, Fut>(
        &self,
        deadline: Instant,
        local: LF,
        mount: MF,
    ) -> Result<Answer<R>, E>
    where
        R: OpResult,
        LF: Future<Output = Result<Vec<R>, E>>,
        MF: Fn(usize, &[usize]) -> Fut,
        Fut: Future<Output = Result<Answer<R>, StatusCode>>,
    {
        let mounts = join_all(self.mounts.iter().map(|(m, idx)| {
            let call = mount(*m, idx);
            async move {
                let res = tokio::time::timeout_at(deadline.into(), call)
                    .await
                    .unwrap_or(Err(StatusCode::BadTimeout));
                (idx, res)
            }
        }));
        let (local, mut mounts) = join(local, mounts).await;
        let local = local?;
        if self.all_local() {
            return Ok(Answer {
                results: local,
                diagnostics: Diagnostics::with_len(0),
            });
        }
        // One mount answered every operation in order: its answer is the
        // request's (the common proxied request; nothing to place).
        let whole = self.one_mount()
            && matches!(mounts.as_slice(), [(_, Ok(a))] if a.results.len() == self.n);
        if whole {
            if let Some((_, Ok(answer))) = mounts.pop() {
                return Ok(answer);
            }
        }
        let mut results: Vec<R> = (0..self.n)
            .map(|_| R::with_status(StatusCode::BadUnexpectedError))
            .collect();
        let mut diagnostics = Diagnostics::with_len(self.n);
        for (i, st) in &self.answered {
            results[*i] = R::with_status(*st);
        }
        for (i, r) in self.local.iter().zip(local) {
            results[*i] = r;
        }
        for (idx, res) in mounts {
            match res {
                Ok(answer) => {
                    for (i, r) in idx.iter().zip(answer.results) {
                        if self.both.binary_search(i).is_ok() {
                            results[*i].join(Ok(r));
                        } else {
                            results[*i] = r;
                        }
                    }
                    diagnostics.merge(idx, answer.diagnostics);
                }
                Err(st) => {
                    for i in idx {
                        if self.both.binary_search(i).is_ok() {
                            results[*i].join(Err(st));
                        } else {
                            results[*i] = R::unreachable(st);
                        }
                    }
                }
            }
        }
        Ok(Answer {
            results,
            diagnostics,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A result naming who answered it.
    #[derive(Debug, Clone, PartialEq)]
    enum Who {
        Status(StatusCode),
        Local(usize),
        Mount(usize, usize),
        Joined(usize, Option<usize>),
    }

    impl OpResult for Who {
        fn with_status(status: StatusCode) -> Self {
            Who::Status(status)
        }
        fn join(&mut self, field: Result<Self, StatusCode>) {
            let Who::Local(i) = *self else { return };
            *self = Who::Joined(
                i,
                match field {
                    Ok(Who::Mount(m, _)) => Some(m),
                    _ => None,
                },
            );
        }
    }

    fn mount_answer(m: usize, idx: &[usize]) -> Answer<Who> {
        Answer {
            results: idx.iter().map(|i| Who::Mount(m, *i)).collect(),
            diagnostics: Diagnostics::with_len(idx.len()),
        }
    }

    fn local_answer(split: &Split) -> Vec<Who> {
        split.local().iter().map(|i| Who::Local(*i)).collect()
    }

    #[tokio::test]
    async fn results_land_in_request_order_whichever_backend_answers() {
        let routes = [
            Route::Mount(2),
            Route::Local,
            Route::Mount(0),
            Route::Answered(StatusCode::BadUserAccessDenied),
            Route::Mount(2),
            Route::Both(0),
        ];
        let split = Split::new(routes.len(), |i| routes[i]);
        let far = Instant::now() + Duration::from_secs(10);
        let answer = split
            .run::<_, (), _, _, _>(far, async { Ok(local_answer(&split)) }, |m, idx| {
                let a = mount_answer(m, idx);
                async move { Ok(a) }
            })
            .await
            .unwrap();
        assert_eq!(
            answer.results,
            vec![
                Who::Mount(2, 0),
                Who::Local(1),
                Who::Mount(0, 2),
                Who::Status(StatusCode::BadUserAccessDenied),
                Who::Mount(2, 4),
                Who::Joined(5, Some(0)),
            ]
        );
        assert_eq!(answer.diagnostics.infos.len(), routes.len());
    }

    #[tokio::test]
    async fn a_failed_mount_fails_only_its_own_operations() {
        let routes = [Route::Mount(0), Route::Mount(1), Route::Both(1)];
        let split = Split::new(routes.len(), |i| routes[i]);
        let far = Instant::now() + Duration::from_secs(10);
        let answer = split
            .run::<_, (), _, _, _>(far, async { Ok(local_answer(&split)) }, |m, idx| {
                let a = mount_answer(m, idx);
                async move {
                    if m == 1 {
                        Err(StatusCode::BadNoCommunication)
                    } else {
                        Ok(a)
                    }
                }
            })
            .await
            .unwrap();
        assert_eq!(
            answer.results,
            vec![
                Who::Mount(0, 0),
                Who::Status(StatusCode::BadServerNotConnected),
                // The folder keeps its local answer.
                Who::Joined(2, None),
            ]
        );
    }

    #[tokio::test]
    async fn mounts_run_concurrently_and_each_is_bounded_by_the_deadline() {
        let routes = [
            Route::Mount(0),
            Route::Mount(1),
            Route::Mount(2),
            Route::Mount(3),
            Route::Local,
        ];
        let split = Split::new(routes.len(), |i| routes[i]);
        // Mounts 0..=2 and the local part each wait for all the others:
        // run one after another, none would ever pass the barrier.
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(4));
        let deadline = Instant::now() + Duration::from_millis(1500);
        let local_barrier = barrier.clone();
        let local = local_answer(&split);
        let answer = split
            .run::<_, (), _, _, _>(
                deadline,
                async move {
                    local_barrier.wait().await;
                    Ok(local)
                },
                |m, idx| {
                    let a = mount_answer(m, idx);
                    let barrier = barrier.clone();
                    async move {
                        if m == 3 {
                            // A field server that never answers.
                            std::future::pending::<()>().await;
                        }
                        barrier.wait().await;
                        Ok(a)
                    }
                },
            )
            .await
            .unwrap();
        assert_eq!(
            answer.results,
            vec![
                Who::Mount(0, 0),
                Who::Mount(1, 1),
                Who::Mount(2, 2),
                Who::Status(StatusCode::BadServerNotConnected),
                Who::Local(4),
            ]
        );
    }

    #[tokio::test]
    async fn a_request_for_one_mount_gets_that_mounts_answer_or_its_failure() {
        let split = Split::new(3, |_| Route::Mount(5));
        let far = Instant::now() + Duration::from_secs(10);
        let answer = split
            .run::<_, (), _, _, _>(far, async { Ok(Vec::new()) }, |m, idx| {
                let a = mount_answer(m, idx);
                async move { Ok(a) }
            })
            .await
            .unwrap();
        assert_eq!(
            answer.results,
            vec![Who::Mount(5, 0), Who::Mount(5, 1), Who::Mount(5, 2)]
        );
        let failed = split
            .run::<Who, (), _, _, _>(far, async { Ok(Vec::new()) }, |_, _| async {
                Err(StatusCode::BadNoCommunication)
            })
            .await
            .unwrap();
        assert_eq!(
            failed.results,
            vec![Who::Status(StatusCode::BadServerNotConnected); 3]
        );
        // A short answer is placed like any other (the rest stays unanswered).
        let short = split
            .run::<_, (), _, _, _>(far, async { Ok(Vec::new()) }, |m, idx| {
                let a = mount_answer(m, &idx[..1]);
                async move { Ok(a) }
            })
            .await
            .unwrap();
        assert_eq!(short.results[0], Who::Mount(5, 0));
        assert_eq!(
            short.results[2],
            Who::Status(StatusCode::BadUnexpectedError)
        );
    }

    #[tokio::test]
    async fn an_all_local_request_is_answered_as_the_local_part_returned_it() {
        let split = Split::new(3, |_| Route::Local);
        let far = Instant::now() + Duration::from_secs(10);
        let answer = split
            .run::<Who, (), _, _, _>(far, async { Ok(local_answer(&split)) }, |_, _| async {
                Err(StatusCode::BadInternalError)
            })
            .await
            .unwrap();
        assert_eq!(
            answer.results,
            vec![Who::Local(0), Who::Local(1), Who::Local(2)]
        );
        assert_eq!(answer.diagnostics.infos(), None);
        // A local failure fails the request.
        let failed = split
            .run::<Who, &str, _, _, _>(far, async { Err("session closed") }, |_, _| async {
                Err(StatusCode::BadInternalError)
            })
            .await;
        assert_eq!(failed.err(), Some("session closed"));
    }
}
