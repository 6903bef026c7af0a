//! A running gateway applies a configuration document replaced in its
//! store: live settings at once, as a unit; a document that needs a
//! restart or cannot be planned changes nothing now.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use common::{bounded, TestGateway};
use uagate_config::Config;
use uagate_server::{ReconfigureStatus, CONFIG_KEY};

const BASE: &str =
    "[server]\nmax_channel_count = 110\ndemo_nodes = false\n\n[isolation]\nmode = \"trusted_reservations\"\n\n\
[[isolation.trusted_owners]]\nkey = \"scada\"\nweight = 2\n\n\
[[isolation.ingress]]\ncidr = \"127.0.0.2/32\"\nowner = \"scada\"\n";

fn document(extra_server: &str, weight: u32, cidr: &str) -> String {
    format!(
        "[listen]\nopc_tcp = \"127.0.0.1:0\"\n\n[server]\nmax_channel_count = 110\n{extra_server}\n\n\
         [isolation]\nmode = \"trusted_reservations\"\n\n\
         [[isolation.trusted_owners]]\nkey = \"scada\"\nweight = {weight}\n\n\
         [[isolation.ingress]]\ncidr = \"{cidr}\"\nowner = \"scada\"\n"
    )
}

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));

/// Stores `doc` as the configuration document, as `uagate config import` does.
async fn import(gw: &TestGateway, doc: &str) {
    gw.store
        .set_setting("test", CONFIG_KEY, doc)
        .await
        .expect("document stored");
}

/// Waits (bounded) until the engine reports a status other than `old`.
async fn next_status(gw: &TestGateway, old: &ReconfigureStatus) -> ReconfigureStatus {
    bounded("configuration change noticed", async {
        loop {
            let s = gw.engine().reconfigure_status();
            if &s != old {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test]
async fn weights_and_ingress_rules_change_live_and_other_settings_wait_for_a_restart() {
    let gw = TestGateway::start(BASE).await;
    assert_eq!(gw.engine().classify_peer(A), ("trusted", 2));
    assert_eq!(gw.engine().classify_peer(B), ("ordinary", 1));

    // 1. New weight, and the ingress rule now covers 127.0.0.3 as well.
    import(&gw, &document("", 5, "127.0.0.2/31")).await;
    let s = next_status(&gw, &ReconfigureStatus::Unchanged).await;
    let ReconfigureStatus::Applied(settings) = &s else {
        panic!("expected a live change, got {s:?}");
    };
    assert!(
        settings
            .iter()
            .any(|x| x.starts_with("isolation.trusted_owners"))
            && settings.iter().any(|x| x.starts_with("isolation.ingress")),
        "{settings:?}"
    );
    assert_eq!(gw.engine().classify_peer(A), ("trusted", 5));
    assert_eq!(gw.engine().classify_peer(B), ("trusted", 5));
    assert_eq!(
        gw.engine().applied_config().isolation.trusted_owners[0].weight,
        5
    );

    // 2. A weight change together with a server limit: nothing changes now.
    import(&gw, &document("max_session_count = 90", 9, "127.0.0.2/31")).await;
    let s2 = next_status(&gw, &s).await;
    let ReconfigureStatus::RestartRequired(settings) = &s2 else {
        panic!("expected a restart-required change, got {s2:?}");
    };
    assert!(
        settings.contains(&"server.max_session_count".to_string()),
        "{settings:?}"
    );
    assert_eq!(gw.engine().classify_peer(A), ("trusted", 5), "half-applied");
    let applied = gw.engine().applied_config();
    assert_eq!(applied.isolation.trusted_owners[0].weight, 5);
    assert_eq!(
        applied.server.max_session_count,
        Config::default().server.max_session_count
    );

    // 3. A document that cannot be planned is refused, naming the setting.
    import(&gw, &document("max_session_count = 109", 5, "127.0.0.2/31")).await;
    let s3 = next_status(&gw, &s2).await;
    let ReconfigureStatus::Refused(why) = &s3 else {
        panic!("expected a refusal, got {s3:?}");
    };
    assert!(why.contains("max_channel_count"), "{why}");
    assert_eq!(gw.engine().classify_peer(B), ("trusted", 5));

    // 4. Back to a live-only difference from what is in force: applied.
    import(&gw, &document("", 3, "127.0.0.2/32")).await;
    let s4 = next_status(&gw, &s3).await;
    assert!(matches!(s4, ReconfigureStatus::Applied(_)), "{s4:?}");
    assert_eq!(gw.engine().classify_peer(A), ("trusted", 3));
    assert_eq!(gw.engine().classify_peer(B), ("ordinary", 1));
}

/// The watcher reads both stored parts: a document saved as `config
/// import` saves it (listeners in the overlay) applies its live settings,
/// and a change of the overlay alone is seen and needs a restart.
#[tokio::test]
async fn the_watcher_merges_the_overlay_over_the_replicated_document() {
    let gw = TestGateway::start(BASE).await;
    let live = Config::from_toml(&document("demo_nodes = false", 6, "127.0.0.2/32"))
        .expect("valid document");
    uagate_server::config_store::save(&gw.store, "test", &live)
        .await
        .expect("document saved");
    let s = next_status(&gw, &ReconfigureStatus::Unchanged).await;
    assert!(matches!(s, ReconfigureStatus::Applied(_)), "{s:?}");
    assert_eq!(gw.engine().classify_peer(A), ("trusted", 6));

    let mut moved = live.clone();
    moved.listen.pair = Some("127.0.0.1:4999".parse().expect("address"));
    let saved = uagate_server::config_store::save(&gw.store, "test", &moved)
        .await
        .expect("overlay saved");
    assert!(saved.node && !saved.document, "{saved:?}");
    let s2 = next_status(&gw, &s).await;
    assert_eq!(
        s2,
        ReconfigureStatus::RestartRequired(vec!["listen.pair".to_string()])
    );
}
