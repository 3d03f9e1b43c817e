//! A scripted fake MySQL server for tests of the replication connection: whole packets in
//! and out over a real loopback socket, so the client's handshake, commands and stream
//! framing run exactly as against a server.

use mysql_common::constants::{CapabilityFlags, StatusFlags};
use mysql_common::packets::HandshakePacket;
use mysql_common::proto::MySerialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An OK packet's payload.
pub(crate) const OK: &[u8] = &[0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00];

/// `payload` as one packet with `sequence`.
pub(crate) fn packet(sequence: u8, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(4 + payload.len());
    super::replication_connection::push_header(&mut bytes, payload.len(), sequence);
    bytes.extend_from_slice(payload);
    bytes
}

/// The server's side of one connection.
pub(crate) struct FakeServer {
    /// The accepted socket.
    pub(crate) socket: TcpStream,
}

impl FakeServer {
    /// Sends one packet.
    pub(crate) async fn send(&mut self, sequence: u8, payload: &[u8]) {
        self.socket
            .write_all(&packet(sequence, payload))
            .await
            .unwrap();
    }

    /// Receives one packet, checking its sequence id.
    pub(crate) async fn receive(&mut self, sequence: u8) -> Vec<u8> {
        let mut header = [0u8; 4];
        self.socket.read_exact(&mut header).await.unwrap();
        assert_eq!(header[3], sequence, "client packet sequence");
        let length = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
        let mut payload = vec![0u8; length];
        self.socket.read_exact(&mut payload).await.unwrap();
        payload
    }

    /// Waits for the client to hang up, failing if it sends anything first.
    pub(crate) async fn expect_closed(&mut self) {
        let mut rest = Vec::new();
        self.socket.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "the client sent {} more bytes", rest.len());
    }

    /// Sends the greeting announcing `plugin`; returns the 20-byte nonce.
    pub(crate) async fn greet(&mut self, version: &str, plugin: &str) -> Vec<u8> {
        let capabilities = CapabilityFlags::CLIENT_PROTOCOL_41
            | CapabilityFlags::CLIENT_SECURE_CONNECTION
            | CapabilityFlags::CLIENT_LONG_PASSWORD
            | CapabilityFlags::CLIENT_TRANSACTIONS
            | CapabilityFlags::CLIENT_DEPRECATE_EOF
            | CapabilityFlags::CLIENT_PLUGIN_AUTH
            | CapabilityFlags::CLIENT_CONNECT_WITH_DB;
        let greeting = HandshakePacket::new(
            10,
            version.as_bytes(),
            7,
            *b"abcdefgh",
            Some(&b"ijklmnopqrst\0"[..]),
            capabilities,
            45,
            StatusFlags::empty(),
            Some(plugin.as_bytes()),
        );
        let mut bytes = Vec::new();
        greeting.serialize(&mut bytes);
        self.send(0, &bytes).await;
        b"abcdefghijklmnopqrst".to_vec()
    }
}

/// Starts a fake server running `script` on its first connection; returns the URL to reach
/// it (user `relay`, password `secret`) and the script's task.
pub(crate) async fn fake_server<F, Fut>(script: F) -> (String, tokio::task::JoinHandle<()>)
where
    F: FnOnce(FakeServer) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        script(FakeServer { socket }).await;
    });
    (format!("mysql://relay:secret@127.0.0.1:{port}"), task)
}
