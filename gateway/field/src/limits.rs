//! Operation limits of a field server and batching of requests under them
//! (reference Sessions.md, "Operation limits and MaxArrayLength"; .NET
//! `Session.FetchOperationLimitsAsync` and `SessionClientBatched`).
//!
//! Plain data: the caller reads [`OperationLimits::node_ids`] after a
//! session is activated, passes the results to
//! [`OperationLimits::from_values`], derives the limits to use with
//! [`OperationLimits::effective`], and splits each service call into
//! [`batches`].
//!
//! Rules:
//! - 0 means "no limit" everywhere.
//! - The effective MaxArrayLength is the smallest non-zero of the server's
//!   MaxArrayLength, the client transport quota and the operator's
//!   `max_array_length` override (0 when all are 0).
//! - With an effective MaxArrayLength, an operation limit of 0 or above it
//!   becomes it; a smaller limit is honoured. Without one, the limits are
//!   unchanged.
//! - A non-zero operator override of an operation limit then applies when it
//!   is tighter: the result is the smallest non-zero value, so an override
//!   never raises a limit.

use std::ops::Range;

use opcua_types::{DataValue, NodeId, VariableId, Variant};

/// The field server's operation limits (0 = no limit), as read from
/// Server/ServerCapabilities. Also used for the operator's overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OperationLimits {
    /// Nodes per Read request.
    pub max_nodes_per_read: u32,
    /// Nodes per Write request.
    pub max_nodes_per_write: u32,
    /// Nodes per Browse request.
    pub max_nodes_per_browse: u32,
    /// Methods per Call request.
    pub max_nodes_per_method_call: u32,
    /// Browse paths per TranslateBrowsePathsToNodeIds request.
    pub max_nodes_per_translate: u32,
    /// Nodes per HistoryRead request for raw/processed/at-time data.
    pub max_nodes_per_history_read_data: u32,
    /// Monitored items per Create/Modify/Delete/SetMonitoringMode request.
    pub max_monitored_items_per_call: u32,
    /// Longest array the server accepts in a request.
    pub max_array_length: u32,
    /// Monitored items per subscription (Server/ServerCapabilities/
    /// MaxMonitoredItemsPerSubscription): the link spreads its items over
    /// more subscriptions beyond it (see [`crate::spread`]).
    pub max_monitored_items_per_subscription: u32,
}

/// The smaller of two limits where 0 means "no limit".
fn min_nonzero(a: u32, b: u32) -> u32 {
    match (a, b) {
        (0, v) | (v, 0) => v,
        (a, b) => a.min(b),
    }
}

/// The value of one limit's Read result: 0 unless Good/Uncertain UInt32.
fn limit_value(value: Option<&DataValue>) -> u32 {
    match value {
        Some(dv) if !dv.status().is_bad() => match dv.value {
            Some(Variant::UInt32(v)) => v,
            _ => 0,
        },
        _ => 0,
    }
}

impl OperationLimits {
    /// Node ids to Read (attribute Value) to learn the limits, in the order
    /// [`OperationLimits::from_values`] expects. Called once per activated
    /// session (limits may differ between the servers of a redundant set).
    pub fn node_ids() -> [NodeId; 9] {
        [
            VariableId::Server_ServerCapabilities_OperationLimits_MaxNodesPerRead.into(),
            VariableId::Server_ServerCapabilities_OperationLimits_MaxNodesPerWrite.into(),
            VariableId::Server_ServerCapabilities_OperationLimits_MaxNodesPerBrowse.into(),
            VariableId::Server_ServerCapabilities_OperationLimits_MaxNodesPerMethodCall.into(),
            VariableId::Server_ServerCapabilities_OperationLimits_MaxNodesPerTranslateBrowsePathsToNodeIds.into(),
            VariableId::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryReadData.into(),
            VariableId::Server_ServerCapabilities_OperationLimits_MaxMonitoredItemsPerCall.into(),
            VariableId::Server_ServerCapabilities_MaxArrayLength.into(),
            VariableId::Server_ServerCapabilities_MaxMonitoredItemsPerSubscription.into(),
        ]
    }

    /// Builds limits from the Read results of [`OperationLimits::node_ids`]
    /// (same order). A Bad status, a non-UInt32 value or a missing result
    /// gives 0 (unknown = no limit). Called with the Read response's results.
    pub fn from_values(values: &[DataValue]) -> OperationLimits {
        let v = |i: usize| limit_value(values.get(i));
        OperationLimits {
            max_nodes_per_read: v(0),
            max_nodes_per_write: v(1),
            max_nodes_per_browse: v(2),
            max_nodes_per_method_call: v(3),
            max_nodes_per_translate: v(4),
            max_nodes_per_history_read_data: v(5),
            max_monitored_items_per_call: v(6),
            max_array_length: v(7),
            max_monitored_items_per_subscription: v(8),
        }
    }

    /// The limits to use toward a server: its limits capped to the effective
    /// MaxArrayLength (smallest non-zero of the server's, the client's
    /// `client_max_array_length` transport quota and the operator's
    /// `max_array_length` override; an operation limit of 0 or above it
    /// becomes it; none → unchanged), then tightened by the operator's
    /// non-zero overrides (smallest non-zero value; never raised). Called
    /// after [`OperationLimits::from_values`], before batching requests.
    pub fn effective(
        server: &OperationLimits,
        client_max_array_length: u32,
        overrides: &OperationLimits,
    ) -> OperationLimits {
        let max_array_length = min_nonzero(
            min_nonzero(server.max_array_length, client_max_array_length),
            overrides.max_array_length,
        );
        let limit = |server: u32, over: u32| {
            let capped = if max_array_length != 0 && (server == 0 || server > max_array_length) {
                max_array_length
            } else {
                server
            };
            min_nonzero(capped, over)
        };
        OperationLimits {
            max_nodes_per_read: limit(server.max_nodes_per_read, overrides.max_nodes_per_read),
            max_nodes_per_write: limit(server.max_nodes_per_write, overrides.max_nodes_per_write),
            max_nodes_per_browse: limit(
                server.max_nodes_per_browse,
                overrides.max_nodes_per_browse,
            ),
            max_nodes_per_method_call: limit(
                server.max_nodes_per_method_call,
                overrides.max_nodes_per_method_call,
            ),
            max_nodes_per_translate: limit(
                server.max_nodes_per_translate,
                overrides.max_nodes_per_translate,
            ),
            max_nodes_per_history_read_data: limit(
                server.max_nodes_per_history_read_data,
                overrides.max_nodes_per_history_read_data,
            ),
            max_monitored_items_per_call: limit(
                server.max_monitored_items_per_call,
                overrides.max_monitored_items_per_call,
            ),
            max_array_length,
            // Not an array length: only the operator's override tightens it.
            max_monitored_items_per_subscription: min_nonzero(
                server.max_monitored_items_per_subscription,
                overrides.max_monitored_items_per_subscription,
            ),
        }
    }
}

/// Splits `len` operations into consecutive ranges of at most `limit`
/// (0 = one range). `len` 0 gives no ranges. Called to batch the operations
/// array of one service call under its effective limit.
pub fn batches(len: usize, limit: u32) -> Vec<Range<usize>> {
    let size = match usize::try_from(limit) {
        Ok(0) | Err(_) => len.max(1),
        Ok(n) => n,
    };
    (0..len)
        .step_by(size)
        .map(|start| start..start.saturating_add(size).min(len))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opcua_types::StatusCode;

    fn all(v: u32) -> OperationLimits {
        OperationLimits {
            max_nodes_per_read: v,
            max_nodes_per_write: v,
            max_nodes_per_browse: v,
            max_nodes_per_method_call: v,
            max_nodes_per_translate: v,
            max_nodes_per_history_read_data: v,
            max_monitored_items_per_call: v,
            max_array_length: v,
            // Not an operation limit: no array-length cap applies to it.
            max_monitored_items_per_subscription: 0,
        }
    }

    fn ops(v: u32, max_array_length: u32) -> OperationLimits {
        OperationLimits {
            max_array_length,
            ..all(v)
        }
    }

    fn none() -> OperationLimits {
        OperationLimits::default()
    }

    #[test]
    fn node_ids_match_the_standard_numeric_ids() {
        let want = [
            11705u32, 11707, 11710, 11709, 11712, 12165, 11714, 11702, 24104,
        ];
        let got = OperationLimits::node_ids();
        for (id, n) in got.iter().zip(want) {
            assert_eq!(*id, NodeId::new(0, n));
        }
    }

    #[test]
    fn from_values_reads_uint32_in_order() {
        let values: Vec<DataValue> = (1..=9u32).map(|v| DataValue::new_now(v * 10)).collect();
        let l = OperationLimits::from_values(&values);
        assert_eq!(
            l,
            OperationLimits {
                max_nodes_per_read: 10,
                max_nodes_per_write: 20,
                max_nodes_per_browse: 30,
                max_nodes_per_method_call: 40,
                max_nodes_per_translate: 50,
                max_nodes_per_history_read_data: 60,
                max_monitored_items_per_call: 70,
                max_array_length: 80,
                max_monitored_items_per_subscription: 90,
            }
        );
    }

    #[test]
    fn from_values_bad_status_wrong_type_or_missing_is_zero() {
        let bad = DataValue {
            value: Some(Variant::UInt32(100)),
            status: Some(StatusCode::BadNodeIdUnknown),
            ..DataValue::default()
        };
        let values = vec![
            bad,
            DataValue::new_now(100i32),
            DataValue::new_now(100u16),
            DataValue::new_now("100"),
            DataValue::default(),
            DataValue::new_now(7u32),
        ];
        let l = OperationLimits::from_values(&values);
        assert_eq!(
            l,
            OperationLimits {
                max_nodes_per_history_read_data: 7,
                ..none()
            }
        );
        assert_eq!(OperationLimits::from_values(&[]), none());
    }

    #[test]
    fn no_effective_max_array_length_leaves_limits_unchanged() {
        let server = OperationLimits {
            max_nodes_per_read: 500,
            max_nodes_per_write: 0,
            ..ops(1000, 0)
        };
        assert_eq!(OperationLimits::effective(&server, 0, &none()), server);
    }

    #[test]
    fn effective_max_array_length_is_the_smaller_non_zero_side() {
        let e = |server_mal, client_mal| {
            OperationLimits::effective(&ops(0, server_mal), client_mal, &none()).max_array_length
        };
        assert_eq!(e(1000, 500), 500);
        assert_eq!(e(500, 1000), 500);
        assert_eq!(e(0, 500), 500, "a 0 server side does not constrain");
        assert_eq!(e(500, 0), 500, "a 0 client side does not constrain");
        assert_eq!(e(0, 0), 0);
    }

    #[test]
    fn zero_operation_limit_becomes_the_effective_max_array_length() {
        // From the server side ...
        assert_eq!(
            OperationLimits::effective(&ops(0, 1000), 0, &none()),
            all(1000)
        );
        // ... or from the client side.
        assert_eq!(
            OperationLimits::effective(&ops(0, 0), 800, &none()),
            all(800)
        );
    }

    #[test]
    fn larger_operation_limit_is_capped_smaller_is_honoured() {
        let server = OperationLimits {
            max_nodes_per_read: 5000,
            max_nodes_per_write: 1000,
            max_nodes_per_browse: 999,
            ..ops(10, 1000)
        };
        let e = OperationLimits::effective(&server, 0, &none());
        assert_eq!(e.max_nodes_per_read, 1000);
        assert_eq!(e.max_nodes_per_write, 1000);
        assert_eq!(e.max_nodes_per_browse, 999);
        assert_eq!(e.max_monitored_items_per_call, 10);
        // The client quota tightens the cap below the server's.
        let e = OperationLimits::effective(&server, 500, &none());
        assert_eq!(e.max_nodes_per_read, 500);
        assert_eq!(e.max_nodes_per_write, 500);
        assert_eq!(e.max_nodes_per_browse, 500);
        assert_eq!(e.max_monitored_items_per_call, 10);
        assert_eq!(e.max_array_length, 500);
    }

    #[test]
    fn overrides_only_tighten() {
        let server = OperationLimits {
            max_nodes_per_read: 100,
            max_nodes_per_write: 0,
            ..ops(100, 0)
        };
        let overrides = OperationLimits {
            max_nodes_per_read: 50,          // tighter: applies
            max_nodes_per_write: 20,         // server unlimited: applies
            max_nodes_per_browse: 500,       // looser: ignored
            max_monitored_items_per_call: 0, // no override
            ..none()
        };
        let e = OperationLimits::effective(&server, 0, &overrides);
        assert_eq!(e.max_nodes_per_read, 50);
        assert_eq!(e.max_nodes_per_write, 20);
        assert_eq!(e.max_nodes_per_browse, 100);
        assert_eq!(e.max_monitored_items_per_call, 100);
        assert_eq!(e.max_array_length, 0);
    }

    #[test]
    fn overrides_apply_after_capping() {
        // Capped to 1000 first; an override of 2000 cannot raise it.
        let overrides = OperationLimits {
            max_nodes_per_read: 2000,
            max_nodes_per_write: 300,
            ..none()
        };
        let e = OperationLimits::effective(&ops(0, 1000), 0, &overrides);
        assert_eq!(e.max_nodes_per_read, 1000);
        assert_eq!(e.max_nodes_per_write, 300);
        assert_eq!(e.max_nodes_per_browse, 1000);
    }

    #[test]
    fn max_array_length_override_caps_like_a_quota() {
        let overrides = OperationLimits {
            max_array_length: 200,
            ..none()
        };
        let server = OperationLimits {
            max_nodes_per_read: 100,
            ..ops(0, 1000)
        };
        let e = OperationLimits::effective(&server, 0, &overrides);
        assert_eq!(e.max_array_length, 200);
        assert_eq!(e.max_nodes_per_read, 100);
        assert_eq!(e.max_nodes_per_write, 200);
        // A looser override never raises it.
        let loose = OperationLimits {
            max_array_length: 5000,
            ..none()
        };
        assert_eq!(
            OperationLimits::effective(&ops(0, 1000), 0, &loose),
            all(1000)
        );
    }

    #[test]
    fn items_per_subscription_is_not_capped_by_array_length_only_by_the_override() {
        let server = OperationLimits {
            max_monitored_items_per_subscription: 5000,
            ..ops(0, 1000)
        };
        let e = OperationLimits::effective(&server, 100, &none());
        assert_eq!(e.max_monitored_items_per_subscription, 5000);
        let overrides = OperationLimits {
            max_monitored_items_per_subscription: 250,
            ..none()
        };
        let e = OperationLimits::effective(&server, 0, &overrides);
        assert_eq!(e.max_monitored_items_per_subscription, 250);
        // A PLC that does not announce it: the override alone.
        let e = OperationLimits::effective(&none(), 0, &overrides);
        assert_eq!(e.max_monitored_items_per_subscription, 250);
    }

    #[test]
    fn batches_exact_multiple() {
        assert_eq!(batches(6, 3), vec![0..3, 3..6]);
        assert_eq!(batches(3, 3), vec![0..3]);
    }

    #[test]
    fn batches_with_remainder() {
        assert_eq!(batches(7, 3), vec![0..3, 3..6, 6..7]);
        assert_eq!(batches(2, 3), vec![0..2]);
        assert_eq!(batches(3, 1), vec![0..1, 1..2, 2..3]);
    }

    #[test]
    fn batches_limit_zero_is_one_range() {
        assert_eq!(batches(10, 0), vec![0..10]);
        assert_eq!(batches(1, 0), vec![0..1]);
    }

    #[test]
    fn batches_len_zero_is_empty() {
        assert!(batches(0, 0).is_empty());
        assert!(batches(0, 5).is_empty());
    }
}
