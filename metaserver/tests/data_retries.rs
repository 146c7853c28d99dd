//! Data records asked for again after a proxy died midway. A put sent again under its name
//! (`DataSpec.put_id`): the metaserver forgets the first try and names for deletion both the
//! copies it recorded and the servers it was still to store on, where its bytes may lie
//! unrecorded. A new value recorded again (its commit applied again from the journal): the
//! copies recorded with it the first time are not named stale.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::linpack;
use ninf_metaserver::{Metaserver, MetaserverConfig};
use ninf_proto::v1;

async fn two_servers(dir: &tempfile::TempDir) -> std::sync::Arc<Metaserver> {
    let config = MetaserverConfig {
        data_dir: dir.path().to_path_buf(),
        ..MetaserverConfig::default()
    };
    let metaserver = Metaserver::open(config).await.unwrap();
    for address in ["a:1", "b:1"] {
        let module = v1::ModuleInterface {
            name: "linpack".into(),
            functions: linpack(),
            ..Default::default()
        };
        let info = v1::ServerInfo {
            mflops: 500.0,
            processors: 1,
            ..Default::default()
        };
        let registration = v1::RegisterRequest {
            address: address.into(),
            info: Some(info),
            modules: vec![module],
            failed_modules: Vec::new(),
        };
        metaserver.register(registration).await.unwrap();
        let load = v1::LoadSample {
            free_memory_bytes: 1 << 30,
            ..Default::default()
        };
        let heartbeat = v1::HeartbeatRequest {
            address: address.into(),
            load: Some(load),
        };
        metaserver.heartbeat(heartbeat).await.unwrap();
    }
    metaserver
}

fn put(put_id: &str) -> v1::CreateDataRequest {
    v1::CreateDataRequest {
        owner: "client".into(),
        spec: Some(v1::DataSpec {
            element_type: v1::ElementType::Double as i32,
            bytes: 800,
            shape: vec![100],
            mode: v1::DataMode::Persistent as i32,
            replicas: 2,
            put_id: put_id.into(),
            ..Default::default()
        }),
        avoid: Vec::new(),
    }
}

#[tokio::test]
async fn a_put_sent_again_names_the_first_tries_copies_and_where_it_was_still_to_store() {
    let dir = tempfile::tempdir().unwrap();
    let metaserver = two_servers(&dir).await;
    let first = metaserver.create_data(put("p1")).await.unwrap();
    let id = first.info.unwrap().id;
    let (stored, still_to_store) = (first.servers[0].clone(), first.servers[1].clone());
    // The first copy was stored and recorded; the proxy died while storing the second.
    let copy = v1::DataCopy {
        server: stored.clone(),
        object_id: "o1".into(),
    };
    let added = v1::AddCopyRequest {
        id: id.clone(),
        owner: "client".into(),
        copy: Some(copy.clone()),
        ..Default::default()
    };
    metaserver.add_data_copy(added).await.unwrap();

    let again = metaserver.create_data(put("p1")).await.unwrap();
    assert_ne!(again.info.unwrap().id, id);
    assert_eq!(again.evicted, [copy], "the recorded copy, to delete");
    assert_eq!(
        again.earlier_tries,
        [v1::DataOwned {
            server: still_to_store,
            id
        }],
        "where its bytes may lie unrecorded"
    );
    let other = metaserver.create_data(put("p2")).await.unwrap();
    assert!(other.evicted.is_empty() && other.earlier_tries.is_empty());
}

#[tokio::test]
async fn a_new_value_recorded_again_names_none_of_its_own_copies_stale() {
    let dir = tempfile::tempdir().unwrap();
    let metaserver = two_servers(&dir).await;
    let made = metaserver.create_data(put("")).await.unwrap();
    let id = made.info.unwrap().id;
    let copy = |server: &str, object_id: &str| v1::DataCopy {
        server: server.into(),
        object_id: object_id.into(),
    };
    let record = |c: v1::DataCopy, replace: bool, further: Vec<v1::DataCopy>| v1::AddCopyRequest {
        id: id.clone(),
        owner: "client".into(),
        copy: Some(c),
        replace,
        further_copies: further,
        only_if_room: false,
    };
    for (server, object) in [("a:1", "old-a"), ("b:1", "old-b")] {
        let first = record(copy(server, object), false, Vec::new());
        metaserver.add_data_copy(first).await.unwrap();
    }
    let new_value = || record(copy("a:1", "new-a"), true, vec![copy("b:1", "new-b")]);
    let once = metaserver.add_data_copy(new_value()).await.unwrap();
    let mut stale = once.stale.clone();
    stale.sort_by(|x, y| x.server.cmp(&y.server));
    assert_eq!(stale, [copy("a:1", "old-a"), copy("b:1", "old-b")]);
    let again = metaserver.add_data_copy(new_value()).await.unwrap();
    assert!(again.stale.is_empty(), "{:?}", again.stale);
    let mut copies = again.info.unwrap().copies;
    copies.sort_by(|x, y| x.server.cmp(&y.server));
    assert_eq!(copies, [copy("a:1", "new-a"), copy("b:1", "new-b")]);
}
