//! The reference gateway (`tokentap_sim::gateway`) as the attribution tests
//! use it: on a free loopback port, with a wait for its record of a request.

use std::time::{Duration, Instant};
pub use tokentap_sim::gateway::{Gateway, GatewayConfig, GatewayTruth};

pub struct TestGateway(Gateway);

impl std::ops::Deref for TestGateway {
    type Target = Gateway;
    fn deref(&self) -> &Gateway {
        &self.0
    }
}

impl TestGateway {
    pub fn spawn(cfg: GatewayConfig) -> TestGateway {
        TestGateway(Gateway::spawn("127.0.0.1:0".parse().unwrap(), cfg).unwrap())
    }

    /// What the gateway did for request `id`, waiting up to 10 s for it.
    pub async fn truth(&self, id: &str) -> GatewayTruth {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(t) = self.0.truth_of(id) {
                return t;
            }
            assert!(Instant::now() < deadline, "gateway never finished {id}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
