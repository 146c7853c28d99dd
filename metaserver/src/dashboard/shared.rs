//! What the dashboard's handlers share: the metaserver they read, and the channels to the
//! servers whose gang tables they ask for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tonic::transport::Channel;

use crate::Metaserver;

/// What the dashboard's handlers share.
pub struct Dashboard {
    pub(super) metaserver: Arc<Metaserver>,
    /// Channels to the servers whose gang tables it reads, by address.
    pub(super) channels: Mutex<HashMap<String, Channel>>,
}

impl Dashboard {
    pub(super) fn new(metaserver: Arc<Metaserver>) -> Dashboard {
        Dashboard {
            metaserver,
            channels: Mutex::new(HashMap::new()),
        }
    }
}
