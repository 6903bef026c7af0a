//! Shared pieces of the field connection tests (`field.rs`,
//! `field_chaos.rs`): simulators as field servers, a northbound client
//! session, namespace lookup and subscriptions. Every wait is bounded.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use opcua_client::{DataChangeCallback, IdentityToken, MonitoredItem, Session};
use opcua_types::{
    DataValue, MessageSecurityMode, MonitoredItemCreateRequest, NodeId, ReadValueId, StatusCode,
    TimestampsToReturn, UserTokenPolicy, VariableId, Variant,
};
use tokio::sync::mpsc;
use uagate_sim::{SimConfig, SimHandle};

use crate::common::{bounded, TestGateway};

/// A simulator (security None) for field connection tests; `name` picks its
/// PKI directory and application URI.
pub async fn start_sim(dir: &std::path::Path, name: &str) -> SimHandle {
    uagate_sim::start(SimConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        pki_dir: dir.join(format!("sim-{name}")),
        application_uri: format!("urn:uagate:sim:{name}"),
        security: false,
        update_interval: Duration::from_millis(50),
        max_nodes_per_read: 0,
        max_monitored_items_per_subscription: 0,
    })
    .await
    .expect("simulator starts")
}

/// A northbound session (SecurityPolicy None, anonymous) to the gateway.
pub async fn connect(
    gw: &TestGateway,
    name: &str,
) -> (Arc<Session>, tokio::task::JoinHandle<StatusCode>) {
    let mut client = gw.client(name);
    let (session, event_loop) = bounded(
        "connect",
        client.connect_to_matching_endpoint(
            (
                gw.url.as_str(),
                "http://opcfoundation.org/UA/SecurityPolicy#None",
                MessageSecurityMode::None,
                UserTokenPolicy::anonymous(),
            ),
            IdentityToken::Anonymous,
        ),
    )
    .await
    .expect("endpoint");
    let h = event_loop.spawn();
    assert!(bounded("activate", session.wait_for_connection()).await);
    (session, h)
}

/// The server's NamespaceArray.
pub async fn namespace_array(session: &Session) -> Vec<String> {
    let v = session
        .read(
            &[ReadValueId::from(NodeId::new(0, 2255u32))],
            TimestampsToReturn::Neither,
            0.0,
        )
        .await
        .unwrap();
    let Some(Variant::Array(a)) = &v[0].value else {
        panic!("NamespaceArray {v:?}")
    };
    a.values
        .iter()
        .map(|x| match x {
            Variant::String(s) => s.to_string(),
            _ => String::new(),
        })
        .collect()
}

/// Index of namespace `uri` in the server's NamespaceArray.
pub async fn ns_of(session: &Session, uri: &str) -> u16 {
    let uris = namespace_array(session).await;
    let pos = uris
        .iter()
        .position(|u| u == uri)
        .unwrap_or_else(|| panic!("{uri} not in {uris:?}"));
    pos as u16
}

/// Collects the data change values of one northbound subscription on `node`.
pub async fn subscribe(
    s: &Session,
    node: NodeId,
    interval_ms: u64,
) -> mpsc::UnboundedReceiver<DataValue> {
    let (tx, rx) = mpsc::unbounded_channel();
    let sub = s
        .create_subscription(
            Duration::from_millis(interval_ms),
            60,
            10,
            0,
            0,
            true,
            DataChangeCallback::new(move |dv: DataValue, _item: &MonitoredItem| {
                let _ = tx.send(dv);
            }),
        )
        .await
        .unwrap();
    let req = MonitoredItemCreateRequest {
        item_to_monitor: ReadValueId::from(node),
        monitoring_mode: opcua_types::MonitoringMode::Reporting,
        requested_parameters: opcua_types::MonitoringParameters {
            client_handle: 1,
            sampling_interval: interval_ms as f64,
            queue_size: 10,
            discard_oldest: true,
            ..Default::default()
        },
    };
    let r = s
        .create_monitored_items(sub, TimestampsToReturn::Both, vec![req])
        .await
        .unwrap();
    assert!(r[0].result.status_code.is_good(), "{r:?}");
    rx
}

/// A value of the simulator's diagnostics summary (session and
/// subscription counts).
pub fn sim_summary(sim: &SimHandle, id: VariableId) -> u32 {
    match sim
        .server_handle()
        .info()
        .summary()
        .get(id)
        .and_then(|dv| dv.value)
    {
        Some(Variant::UInt32(n)) => n,
        other => panic!("{id:?}: {other:?}"),
    }
}

/// Waits up to 5 s until field connection `name` is connected over `url`;
/// returns its status then.
pub async fn wait_active_on(gw: &TestGateway, name: &str, url: &str) -> uagate_field::FieldStatus {
    let t0 = Instant::now();
    loop {
        let st = gw.engine().field_status(name).unwrap();
        if st.active_endpoint.as_deref() == Some(url)
            && st.state == uagate_field::ConnState::Connected
        {
            return st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{name} not on {url}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A TCP relay in front of a field server that holds every chunk the field
/// server sends for `delay` before passing it on (a slow link or a slow
/// PLC). The delay starts at zero and is changed with [`SlowLink::set`].
pub struct SlowLink {
    /// The URL the gateway connects to instead of the field server's.
    pub url: String,
    delay_ms: Arc<std::sync::atomic::AtomicU64>,
    /// Reads of the field server's side that passed data on (about one
    /// per reply when requests go one at a time).
    replies: Arc<std::sync::atomic::AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl SlowLink {
    /// Relays 127.0.0.1:ephemeral to the field server at `endpoint_url`.
    pub async fn start(endpoint_url: &str) -> SlowLink {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let target = endpoint_url
            .trim_start_matches("opc.tcp://")
            .trim_end_matches('/')
            .to_string();
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("opc.tcp://{}/", l.local_addr().unwrap());
        let delay_ms = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let d = delay_ms.clone();
        let replies = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = replies.clone();
        let accept = tokio::spawn(async move {
            while let Ok((down, _)) = l.accept().await {
                let Ok(up) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let d = d.clone();
                let counted = counted.clone();
                tokio::spawn(async move {
                    let (mut dr, mut dw) = down.into_split();
                    let (mut ur, mut uw) = up.into_split();
                    let north = async move {
                        let mut buf = vec![0u8; 65536];
                        while let Ok(n @ 1..) = dr.read(&mut buf).await {
                            if uw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    };
                    let south = async move {
                        let mut buf = vec![0u8; 65536];
                        while let Ok(n @ 1..) = ur.read(&mut buf).await {
                            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            let ms = d.load(std::sync::atomic::Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            if dw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    };
                    tokio::select! { _ = north => {}, _ = south => {} }
                });
            }
        });
        SlowLink {
            url,
            delay_ms,
            replies,
            accept,
        }
    }

    /// How many reads of the field server's replies passed data on so far.
    pub fn replies(&self) -> u64 {
        self.replies.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Holds each chunk from the field server this long from now on.
    pub fn set(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The gateway namespace index of the simulator namespace of mount `name`:
/// the simulator's own URI for the first mount that published it, the
/// mount-qualified URI for the others.
pub async fn sim_ns_of_mount(session: &Session, name: &str) -> u16 {
    let uris = namespace_array(session).await;
    let qualified = format!("urn:uagate:field:{name}:{}", uagate_sim::NAMESPACE_URI);
    let own = uris.iter().position(|u| *u == qualified);
    let shared = uris.iter().position(|u| u == uagate_sim::NAMESPACE_URI);
    own.or(shared)
        .unwrap_or_else(|| panic!("no namespace for {name} in {uris:?}")) as u16
}

/// One `[[field_servers]]` entry (security None, quick keep-alive and
/// reconnect) for the gateway's configuration.
pub fn field_toml(name: &str, redundancy: &str, urls: &[&str]) -> String {
    let eps: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "[[field_servers]]\nname = \"{name}\"\nendpoints = [{}]\nsecurity_mode = \"none\"\nsecurity_policy = \"None\"\nredundancy = \"{redundancy}\"\nkeep_alive_interval = \"200ms\"\nrequest_timeout = \"3s\"\n[field_servers.reconnect]\ninitial_delay = \"200ms\"\nmax_delay = \"1s\"\n",
        eps.join(", ")
    )
}

/// Waits up to 15 s until field connection `name` is connected.
pub async fn wait_connected(gw: &TestGateway, name: &str) {
    let t0 = Instant::now();
    loop {
        if let Some(st) = gw.engine().field_status(name) {
            if st.state == uagate_field::ConnState::Connected {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "field {name} not connected: {st:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The node ids `node` organizes or has as components (hierarchical
/// references, forward), through the gateway.
pub async fn children(s: &Session, node: NodeId) -> Vec<NodeId> {
    let br = s
        .browse(
            &[opcua_types::BrowseDescription {
                node_id: node,
                browse_direction: opcua_types::BrowseDirection::Forward,
                reference_type_id: NodeId::new(0, 33u32),
                include_subtypes: true,
                node_class_mask: opcua_types::NodeClassMask::all().bits(),
                result_mask: opcua_types::BrowseResultMask::All as u32,
            }],
            0,
            None,
        )
        .await
        .unwrap();
    br[0]
        .references
        .iter()
        .flatten()
        .map(|r| r.node_id.node_id.clone())
        .collect()
}
