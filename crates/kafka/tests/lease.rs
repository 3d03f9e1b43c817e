//! The standby lease against a real Apache Kafka broker (the testkit's shared one).

use std::time::Duration;

use outbox_kafka::{LeaderLease, LeaseError, LeaseSettings, LeaseState};
use outbox_testkit::kafka::KafkaBroker;
use rdkafka::ClientConfig;

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

fn settings(broker: &KafkaBroker, topic: &str, group: &str, create: bool) -> LeaseSettings {
    let mut client = ClientConfig::new();
    client.set("bootstrap.servers", broker.bootstrap());
    LeaseSettings {
        client,
        topic: topic.to_owned(),
        group_id: group.to_owned(),
        session_timeout: Duration::from_secs(6),
        create_topic: create,
        replication_factor: 1,
        request_timeout: Duration::from_secs(10),
        deaf_to_loss: false,
    }
}

async fn leader_within(lease: &LeaderLease, limit: Duration) -> u64 {
    tokio::time::timeout(limit, lease.wait_until_leader())
        .await
        .unwrap_or_else(|_| panic!("no leadership within {limit:?}: {:?}", lease.state()))
}

/// One leader at a time; a standby joining does not take the partition away; when the
/// leader leaves, the standby leads with a greater epoch (committed through the group
/// coordinator); a store refusal makes the current owner take an epoch above the stored one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_with_growing_epochs() {
    let broker = KafkaBroker::shared().await.unwrap();
    let topic = unique("lease-topic");
    let group = unique("lease-group");
    let first = LeaderLease::start(settings(broker, &topic, &group, true))
        .await
        .unwrap();
    let first_epoch = leader_within(&first, Duration::from_secs(30)).await;
    assert_eq!(first_epoch, 1, "a new group's first epoch");

    let second = LeaderLease::start(settings(broker, &topic, &group, true))
        .await
        .unwrap();
    // The standby joins (a cooperative rebalance) but the leader keeps its term.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(first.state(), LeaseState::Leader { epoch: first_epoch });
    assert!(
        matches!(second.state(), LeaseState::Standby { .. }),
        "{:?}",
        second.state()
    );

    // The leader leaves the group: the standby takes over at once, with a newer epoch.
    let mut first_state = first.subscribe();
    first.close().await;
    assert!(matches!(
        *first_state.borrow_and_update(),
        LeaseState::Standby { .. }
    ));
    let second_epoch = leader_within(&second, Duration::from_secs(20)).await;
    assert!(second_epoch > first_epoch, "{second_epoch} > {first_epoch}");

    // The store says a newer epoch (e.g. 40) wrote: the term ends, and the owner (still this
    // member) takes an epoch above it.
    let lost = tokio::spawn({
        let mut watch = second.subscribe();
        async move {
            watch
                .wait_for(|state| matches!(state, LeaseState::Standby { .. }))
                .await
                .map(|state| state.clone())
        }
    });
    second.relinquish_above(40);
    let standby = tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(&standby, LeaseState::Standby { reason } if reason.contains("refused")),
        "{standby:?}"
    );
    let raised = leader_within(&second, Duration::from_secs(10)).await;
    assert_eq!(raised, 41);
    second.close().await;

    // A later member of the group continues from the committed epoch.
    let third = LeaderLease::start(settings(broker, &topic, &group, true))
        .await
        .unwrap();
    assert_eq!(leader_within(&third, Duration::from_secs(30)).await, 42);
    third.close().await;
}

#[tokio::test]
async fn a_missing_lease_topic_is_a_clear_definite_error_without_create_topics() {
    let broker = KafkaBroker::shared().await.unwrap();
    let topic = unique("lease-missing");
    let error = LeaderLease::start(settings(broker, &topic, &unique("g"), false))
        .await
        .unwrap_err();
    assert!(
        matches!(error, LeaseError::TopicMissing { .. }),
        "{error:?}"
    );
    assert!(!error.is_transient());
    let message = error.to_string();
    assert!(
        message.contains(&topic) && message.contains("kafka.create_topics"),
        "{message}"
    );
}
