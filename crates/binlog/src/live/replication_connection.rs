//! The replication connection: the small part of the MySQL client protocol a binlog dump
//! needs (handshake and authentication, a few `SET` statements, COM_REGISTER_SLAVE,
//! COM_BINLOG_DUMP / COM_BINLOG_DUMP_GTID), then the event stream read straight from the
//! socket into [`EventBatch`]es.
//!
//! Why not `mysql_async`'s `BinlogStream` (which the reader used before): for every event it
//! copies the packet into a pooled buffer, tries to parse it as an OK packet, copies the body
//! again into an `Event`, clones the format description into it (two allocations) and parses
//! every TABLE_MAP into its own map; about 14 600 instructions per transaction of six events
//! before our decoder ran (crate README, callgrind). Here a batch is the buffer the socket
//! was read into: events are decoded where they lie, and only the unfinished packet at its
//! end is copied into the next buffer. `mysql_async` still opens every other connection
//! (startup check, column names, position lookups), and the packet formats come from
//! `mysql_common`.
//!
//! # Contract
//! * [`ReplicationConnection::open`] connects over TCP (never a Unix socket), switches to TLS
//!   after the server's greeting when the mode asks for it (`crate::tls`: an `SSLRequest`
//!   packet, then the rustls handshake, then the rest of the protocol inside TLS), and
//!   authenticates with `mysql_native_password`, `caching_sha2_password`, MariaDB's
//!   `client_ed25519` or, when the URL enables it, `mysql_clear_password`.
//! * `caching_sha2_password` full authentication sends the password only where no one else
//!   can read it: inside TLS; over plaintext RSA-encrypted to the pinned key
//!   (`server_public_key_path`), or to a key fetched from the server only when the operator
//!   allowed that (`allow_public_key_retrieval`); otherwise it fails, naming the three fixes.
//! * Errors are `mysql_async::Error` values of the same kinds the client library reports
//!   (server errors with their code, I/O errors, `ConnectionClosed`, `PacketOutOfOrder`,
//!   `UnexpectedPacket`), so the reader's transient/definite classification
//!   (`connection.rs`) and its 1236 refinements apply unchanged.
//! * [`ReplicationConnection::read_batch`] is cancel-safe: bytes read stay in the connection's
//!   buffer when the future is dropped.
//! * Packets are checked: sequence ids must follow each other (a lost or repeated packet is
//!   `PacketOutOfOrder`, never a misread event), and a logical packet of more than
//!   16 MiB - 1 bytes is joined from its parts in place before it is handed out. A packet
//!   larger than the client's `max_allowed_packet` (1 GiB) is `PacketTooLarge`.

use std::ops::Range;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use mysql_async::{DriverError, Error, IoError, Opts};
use mysql_common::constants::{CapabilityFlags, Command};
use mysql_common::io::ParseBuf;
use mysql_common::packets::{
    AuthPlugin, AuthSwitchRequest, ComBinlogDump, ComBinlogDumpGtid, ComRegisterSlave, ErrPacket,
    HandshakePacket, HandshakeResponse, Sid, SslRequest,
};
use mysql_common::proto::MySerialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::tls::{TlsMode, TlsSession};

/// Largest payload of one physical packet; a payload of exactly this size continues in the
/// next packet.
const MAX_PHYSICAL_PAYLOAD: usize = 0xFF_FFFF;

/// Length of a packet header: 3-byte payload length, 1-byte sequence id.
const PACKET_HEADER_LEN: usize = 4;

/// Free space the buffer has before each socket read: large enough that one read usually
/// brings hundreds of events (one wake-up and one syscall for all of them), small enough to
/// stay in the CPU cache while the events are decoded.
const READ_CHUNK: usize = 128 * 1024;

/// A batch's buffer that grew beyond this (a large event) is shrunk back when it is reused,
/// so one large row does not keep its memory for the rest of the stream.
const KEEP_BUFFER_CAPACITY: usize = 4 * READ_CHUNK;

/// First byte of an event packet in the dump stream.
const EVENT_PACKET: u8 = 0x00;
/// First byte of an error packet.
const ERROR_PACKET: u8 = 0xFF;
/// First byte of an EOF packet (end of a non-blocking dump, or the server stopping it).
const EOF_PACKET: u8 = 0xFE;

/// The capabilities this client asks for (intersected with the server's): 4.1 protocol,
/// plugin authentication, and the EOF packet replaced by OK (the same set `mysql_async`
/// asks for, without local files and multi-statements, which a dump never uses).
fn client_capabilities() -> CapabilityFlags {
    CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_SECURE_CONNECTION
        | CapabilityFlags::CLIENT_LONG_PASSWORD
        | CapabilityFlags::CLIENT_TRANSACTIONS
        | CapabilityFlags::CLIENT_MULTI_RESULTS
        | CapabilityFlags::CLIENT_PS_MULTI_RESULTS
        | CapabilityFlags::CLIENT_DEPRECATE_EOF
        | CapabilityFlags::CLIENT_PLUGIN_AUTH
}

/// Where the dump starts.
#[derive(Debug, Clone)]
pub(crate) enum DumpStart<'a> {
    /// A file and offset (COM_BINLOG_DUMP).
    Position {
        /// Binlog file name.
        file: &'a str,
        /// Byte offset in it.
        position: u64,
    },
    /// MySQL: the transactions not in this GTID set (COM_BINLOG_DUMP_GTID).
    MysqlGtid(Vec<Sid<'static>>),
    /// MariaDB: wherever `@slave_connect_state`, set before, says (COM_BINLOG_DUMP with no
    /// file).
    ConnectState,
}

/// Events read from the stream, in order: the buffer the socket was read into and where each
/// event lies in it. Reused: [`ReplicationConnection::read_batch`] takes an empty or used
/// batch and refills it.
#[derive(Debug, Default)]
pub(crate) struct EventBatch {
    /// Bytes as read: packet headers, the status byte of each event packet and the events.
    bytes: Vec<u8>,
    /// Each event's bytes in `bytes` (19-byte header, body, checksum), in stream order.
    events: Vec<Range<usize>>,
    /// Sum of the events' sizes, for metrics and batch limits.
    event_bytes: usize,
}

impl EventBatch {
    /// The `index`th event's bytes, exactly as the server sent them.
    pub(crate) fn get(&self, index: usize) -> Option<&[u8]> {
        let range = self.events.get(index)?;
        self.bytes.get(range.clone())
    }

    /// How many events the batch holds.
    pub(crate) fn len(&self) -> usize {
        self.events.len()
    }

    /// True when the batch holds no event.
    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Sum of the event sizes.
    pub(crate) fn event_bytes(&self) -> usize {
        self.event_bytes
    }

    /// Forgets the events, keeping (bounded) capacity for the next use.
    fn clear(&mut self) {
        self.bytes.clear();
        self.events.clear();
        self.event_bytes = 0;
        if self.bytes.capacity() > KEEP_BUFFER_CAPACITY {
            self.bytes.shrink_to(READ_CHUNK);
        }
    }
}

/// Why [`ReplicationConnection::read_batch`] returned no batch.
#[derive(Debug)]
pub(crate) enum ReadFailure {
    /// No byte arrived for the whole idle timeout (a large event still arriving in pieces
    /// is not idle).
    Idle,
    /// The connection failed (I/O error, closed by the server).
    Connection(Error),
}

/// What ended a batch, besides a full buffer or nothing more to read yet.
#[derive(Debug)]
pub(crate) enum StreamEnd {
    /// The server sent an error packet (e.g. 1236: purged position, duplicate server id).
    Failed(Error),
    /// The server ended the stream (EOF packet).
    Ended,
}

/// How the connection is secured and authenticated, prepared by the endpoint for each
/// connect (files are read then, so replaced certificates and rotated passwords apply at the
/// next reconnect).
#[derive(Clone, Default)]
pub(crate) struct ConnectSecurity {
    /// The mode (decides what happens when the server offers no TLS).
    pub(crate) mode: TlsMode,
    /// The rustls configuration; `None` for `disabled`.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    /// What the certificate is checked against, for the session report.
    pub(crate) verification: String,
    /// `tls.ca_file`, for the hint of a certificate no trusted CA signed.
    pub(crate) ca_file: Option<std::path::PathBuf>,
    /// The server's RSA key pinned by the operator (PEM), for plaintext
    /// `caching_sha2_password`.
    pub(crate) pinned_server_key: Option<Vec<u8>>,
    /// Whether the server may be asked for its RSA key over plaintext.
    pub(crate) allow_public_key_retrieval: bool,
    /// The password from `password_file`, replacing the URL's.
    pub(crate) password: Option<String>,
}

/// The byte stream under the protocol: the TCP socket, or TLS over it.
enum Transport {
    /// Plaintext.
    Plain(TcpStream),
    /// TLS (boxed: the session state is large).
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    /// Only while the socket moves into the TLS session.
    Upgrading,
}

impl Transport {
    /// Reads what is available without waiting (`WouldBlock` when nothing is).
    fn try_read_buf(&mut self, buffer: &mut Vec<u8>) -> std::io::Result<usize> {
        match self {
            Transport::Plain(socket) => socket.try_read_buf(buffer),
            Transport::Tls(_) | Transport::Upgrading => {
                // One poll with a waker that does nothing: decrypted bytes rustls holds, or
                // records the socket already has, come back at once; `Pending` leaves no
                // state behind (what was read stays in the TLS session's buffer).
                let mut context = Context::from_waker(std::task::Waker::noop());
                let read = std::pin::pin!(self.read_buf(buffer));
                match std::future::Future::poll(read, &mut context) {
                    Poll::Ready(result) => result,
                    Poll::Pending => Err(std::io::ErrorKind::WouldBlock.into()),
                }
            }
        }
    }
}

fn upgrading_error() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        "TLS upgrade did not finish",
    )
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(socket) => Pin::new(socket).poll_read(context, buffer),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_read(context, buffer),
            Transport::Upgrading => Poll::Ready(Err(upgrading_error())),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(socket) => Pin::new(socket).poll_write(context, bytes),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_write(context, bytes),
            Transport::Upgrading => Poll::Ready(Err(upgrading_error())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(socket) => Pin::new(socket).poll_flush(context),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(context),
            Transport::Upgrading => Poll::Ready(Err(upgrading_error())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(socket) => Pin::new(socket).poll_shutdown(context),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(context),
            Transport::Upgrading => Poll::Ready(Err(upgrading_error())),
        }
    }
}

/// One open replication connection. See the module docs.
pub(crate) struct ReplicationConnection {
    /// The socket, or the TLS session over it.
    socket: Transport,
    /// What the TLS session negotiated (`None`: plaintext), for `check` and the logs.
    tls_session: Option<TlsSession>,
    /// Bytes read from the socket and not handed out yet; always starts at a packet header.
    buffer: Vec<u8>,
    /// The sequence id the next packet from the server must carry.
    sequence: u8,
    /// Capabilities both sides agreed on (error packets are parsed with them).
    capabilities: CapabilityFlags,
    /// Largest logical packet accepted (the client's `max_allowed_packet`).
    max_packet: usize,
    /// How many bytes `buffer` must hold to complete the packet part it ends in, once that
    /// part's header arrived (0 otherwise): an event below 16 MiB then grows the buffer once
    /// to its size instead of doubling it step by step (each step a copy); an event in
    /// several 16 MiB parts grows it geometrically (the total is not known up front).
    needed: usize,
}

impl ReplicationConnection {
    /// Connects to the server `opts` name and authenticates (see the module docs).
    pub(crate) async fn open(
        opts: &Opts,
        security: &ConnectSecurity,
    ) -> Result<ReplicationConnection, Error> {
        let socket = TcpStream::connect((opts.ip_or_hostname(), opts.tcp_port()))
            .await
            .map_err(io_error)?;
        socket.set_nodelay(true).map_err(io_error)?;
        if let Some(interval) = opts.tcp_keepalive() {
            let keepalive = socket2::TcpKeepalive::new()
                .with_time(interval)
                .with_interval(interval);
            socket2::SockRef::from(&socket)
                .set_tcp_keepalive(&keepalive)
                .map_err(io_error)?;
        }
        let mut connection = ReplicationConnection {
            socket: Transport::Plain(socket),
            tls_session: None,
            buffer: Vec::with_capacity(READ_CHUNK),
            sequence: 0,
            capabilities: CapabilityFlags::empty(),
            // The dump stream's packets carry one status byte before the event, so the
            // largest event the server may send (`max_allowed_packet` itself) is one byte
            // more on the wire.
            max_packet: opts.max_allowed_packet().unwrap_or(1 << 30) + 1,
            needed: 0,
        };
        connection.authenticate(opts, security).await?;
        Ok(connection)
    }

    /// The handshake: the server's greeting, our response, then the plugin exchange until
    /// the server's OK.
    async fn authenticate(&mut self, opts: &Opts, security: &ConnectSecurity) -> Result<(), Error> {
        let password = security.password.as_deref().or(opts.pass());
        let greeting = self.read_packet().await?;
        if greeting.first() == Some(&ERROR_PACKET) {
            // E.g. "Host is blocked" or too many connections, sent before the handshake.
            return Err(self.error_from_packet(&greeting, CapabilityFlags::empty()));
        }
        let handshake = ParseBuf(&greeting)
            .parse::<HandshakePacket>(())
            .map_err(|error| {
                definite(format!(
                    "the server's greeting is not a MySQL handshake ({error}): is this the \
                     server's MySQL port?"
                ))
            })?;
        let mut nonce = handshake.scramble_1_ref().to_vec();
        nonce.extend_from_slice(handshake.scramble_2_ref().unwrap_or(&[]));
        // The 20 scramble bytes; the server's zero terminator is not part of them.
        nonce.resize(20, 0);
        let server_offers_tls = handshake
            .capabilities()
            .contains(CapabilityFlags::CLIENT_SSL);
        self.capabilities = handshake.capabilities() & client_capabilities();
        let version = handshake
            .maria_db_server_version_parsed()
            .or_else(|| handshake.server_version_parsed())
            .unwrap_or((0, 0, 0));
        let mut plugin = match handshake.auth_plugin() {
            Some(AuthPlugin::CachingSha2Password) => AuthPlugin::CachingSha2Password,
            _ => AuthPlugin::MysqlNativePassword,
        };
        drop(handshake);
        match (&security.tls, server_offers_tls) {
            (Some(config), true) => {
                self.capabilities |= CapabilityFlags::CLIENT_SSL;
                self.start_tls(opts, config.clone(), security).await?;
            }
            (Some(_), false) if security.mode != TlsMode::Preferred => {
                return Err(tls_refusal(format!(
                    "tls.mode = {}: the server does not offer TLS (its `have_ssl` is not YES). \
                     Give the server a certificate (ssl_cert, ssl_key in its config), or set tls.mode = \
                     preferred / disabled to allow plaintext",
                    security.mode.as_str()
                )));
            }
            // `preferred` without a server certificate, or `disabled`.
            _ => {}
        }
        let auth_data = plugin.gen_data(password, &nonce);
        let response = HandshakeResponse::new(
            auth_data.as_deref(),
            version,
            opts.user().map(str::as_bytes),
            opts.db_name().map(str::as_bytes),
            Some(plugin.clone()),
            self.capabilities,
            None,
            u32::try_from(self.max_packet).unwrap_or(u32::MAX),
        );
        let mut bytes = Vec::new();
        response.serialize(&mut bytes);
        self.write_packet(&bytes).await?;

        let mut switched = false;
        loop {
            let packet = self.read_packet().await?;
            match (packet.first().copied(), &plugin) {
                (Some(0x00), _) => return Ok(()),
                (Some(ERROR_PACKET), _) => {
                    return Err(self.error_from_packet(&packet, self.capabilities))
                }
                (Some(EOF_PACKET), _) if !switched => {
                    switched = true;
                    let request =
                        ParseBuf(&packet)
                            .parse::<AuthSwitchRequest>(())
                            .map_err(|error| {
                                definite(format!(
                                    "the server's authentication switch request does not \
                                     parse ({error}); old-style (pre-4.1) password \
                                     authentication is not supported"
                                ))
                            })?;
                    nonce = request.plugin_data().to_vec();
                    plugin = request.auth_plugin().clone().into_owned();
                    let data = match &plugin {
                        AuthPlugin::MysqlNativePassword
                        | AuthPlugin::CachingSha2Password
                        | AuthPlugin::Ed25519 => plugin.gen_data(password, &nonce),
                        AuthPlugin::MysqlClearPassword if opts.enable_cleartext_plugin() => {
                            plugin.gen_data(password, &nonce)
                        }
                        AuthPlugin::MysqlClearPassword => {
                            return Err(DriverError::CleartextPluginDisabled.into())
                        }
                        other => {
                            return Err(DriverError::UnknownAuthPlugin {
                                name: String::from_utf8_lossy(other.as_bytes()).into_owned(),
                            }
                            .into())
                        }
                    };
                    let mut bytes = Vec::new();
                    if let Some(data) = data {
                        data.serialize(&mut bytes);
                    }
                    self.write_packet(&bytes).await?;
                }
                (Some(0x01), AuthPlugin::CachingSha2Password) => match packet.get(1) {
                    // Fast authentication succeeded; the OK packet follows.
                    Some(0x03) => {}
                    // Full authentication: the password, where no one else can read it.
                    Some(0x04) => {
                        if self.tls_session.is_some() {
                            let mut clear = password.unwrap_or_default().as_bytes().to_vec();
                            clear.push(0);
                            self.write_packet(&clear).await?;
                        } else if let Some(key) = &security.pinned_server_key {
                            let encrypted = encrypt_password(password, &nonce, Some(key))?;
                            self.write_packet(&encrypted).await?;
                        } else if security.allow_public_key_retrieval {
                            self.write_packet(&[0x02]).await?;
                            let key = self.read_packet().await?;
                            let encrypted = encrypt_password(password, &nonce, key.get(1..))?;
                            self.write_packet(&encrypted).await?;
                        } else {
                            return Err(definite(
                                "caching_sha2_password needs the password in full, and the \
                                 connection is plaintext: use TLS (tls.mode = required or \
                                 stricter), pin the server's RSA public key \
                                 (tls.server_public_key_path), or set tls.allow_public_key_retrieval \
                                 = true to fetch it unauthenticated (a man in the middle can \
                                 then read the password)"
                                    .into(),
                            ));
                        }
                    }
                    _ => return Err(unexpected(&packet)),
                },
                _ => return Err(unexpected(&packet)),
            }
        }
    }

    /// Sends the `SSLRequest` and runs the TLS handshake over the socket; everything after
    /// it (the handshake response on) goes through TLS.
    async fn start_tls(
        &mut self,
        opts: &Opts,
        config: Arc<rustls::ClientConfig>,
        security: &ConnectSecurity,
    ) -> Result<(), Error> {
        let mut bytes = Vec::new();
        SslRequest::new(
            self.capabilities,
            u32::try_from(self.max_packet).unwrap_or(u32::MAX),
            mysql_common::collations::CollationId::UTF8MB4_GENERAL_CI as u8,
        )
        .serialize(&mut bytes);
        self.write_packet(&bytes).await?;
        if !self.buffer.is_empty() {
            return Err(unexpected(&self.buffer));
        }
        let host = opts.ip_or_hostname().to_owned();
        let server_name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|_| {
            definite(format!(
                "`{host}` is neither a host name nor an IP address TLS can check"
            ))
        })?;
        let Transport::Plain(socket) = std::mem::replace(&mut self.socket, Transport::Upgrading)
        else {
            return Err(io_error(upgrading_error()));
        };
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(server_name, socket)
            .await
            .map_err(|error| tls_handshake_error(error, &host, security.ca_file.as_deref()))?;
        let (_, session) = stream.get_ref();
        self.tls_session = Some(TlsSession {
            version: match session.protocol_version() {
                Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3".into(),
                Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2".into(),
                Some(other) => format!("{other:?}"),
                None => "TLS".into(),
            },
            cipher: session
                .negotiated_cipher_suite()
                .map(|suite| format!("{:?}", suite.suite()))
                .unwrap_or_default(),
            verification: security.verification.clone(),
        });
        self.socket = Transport::Tls(Box::new(stream));
        Ok(())
    }

    /// Connects, switches to TLS (checking the certificate as `security` says) and returns
    /// the first DNS name the server's certificate lists, then hangs up without
    /// authenticating. `None` when the server offers no TLS or the certificate names no
    /// host. For `verify_ca` on the client library's connections: given a name the
    /// certificate holds, its host-name check passes and its chain check remains (the
    /// client library cannot skip only the name check with current rustls errors).
    pub(crate) async fn certificate_dns_name(
        opts: &Opts,
        security: &ConnectSecurity,
    ) -> Result<Option<String>, Error> {
        let Some(config) = security.tls.clone() else {
            return Ok(None);
        };
        let socket = TcpStream::connect((opts.ip_or_hostname(), opts.tcp_port()))
            .await
            .map_err(io_error)?;
        let mut connection = ReplicationConnection {
            socket: Transport::Plain(socket),
            tls_session: None,
            buffer: Vec::with_capacity(1024),
            sequence: 0,
            capabilities: CapabilityFlags::empty(),
            max_packet: 1 << 20,
            needed: 0,
        };
        let greeting = connection.read_packet().await?;
        let capabilities = ParseBuf(&greeting)
            .parse::<HandshakePacket>(())
            .map(|handshake| handshake.capabilities())
            .map_err(|_| unexpected(&greeting))?;
        if !capabilities.contains(CapabilityFlags::CLIENT_SSL) {
            return Ok(None);
        }
        connection.capabilities =
            (capabilities & client_capabilities()) | CapabilityFlags::CLIENT_SSL;
        connection.start_tls(opts, config, security).await?;
        let Transport::Tls(stream) = &connection.socket else {
            return Ok(None);
        };
        let name = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|der| webpki::EndEntityCert::try_from(der).ok())
            .and_then(|certificate| certificate.valid_dns_names().next().map(str::to_owned));
        Ok(name)
    }

    /// What the TLS session negotiated; `None` when the connection is plaintext.
    pub(crate) fn tls_session(&self) -> Option<&TlsSession> {
        self.tls_session.as_ref()
    }

    /// Runs one statement that returns no rows (`SET @...`).
    pub(crate) async fn execute(&mut self, statement: &str) -> Result<(), Error> {
        let mut command = Vec::with_capacity(1 + statement.len());
        command.push(Command::COM_QUERY as u8);
        command.extend_from_slice(statement.as_bytes());
        self.command(&command).await
    }

    /// Registers as a replica and asks for the binlog from `start` (blocking dump: the
    /// server waits for new events at the end instead of ending the stream). Before this,
    /// `execute` sets the session's checksum, heartbeat and MariaDB capability variables.
    pub(crate) async fn request_dump(
        &mut self,
        server_id: u32,
        start: DumpStart<'_>,
    ) -> Result<(), Error> {
        let mut bytes = Vec::new();
        ComRegisterSlave::new(server_id).serialize(&mut bytes);
        self.command(&bytes).await?;
        bytes.clear();
        match start {
            DumpStart::Position { file, position } => {
                let position = u32::try_from(position).map_err(|_| {
                    definite(format!(
                        "position {position} in {file} is above 4 GiB, which COM_BINLOG_DUMP \
                         cannot request; start by GTID instead"
                    ))
                })?;
                ComBinlogDump::new(server_id)
                    .with_filename(file.as_bytes())
                    .with_pos(position)
                    .serialize(&mut bytes)
            }
            DumpStart::MysqlGtid(sids) => ComBinlogDumpGtid::new(server_id)
                .with_pos(4)
                .with_sids(sids)
                .serialize(&mut bytes),
            DumpStart::ConnectState => ComBinlogDump::new(server_id)
                .with_pos(4)
                .serialize(&mut bytes),
        }
        self.sequence = 0;
        self.write_packet(&bytes).await
    }

    /// Sends a command and reads its OK (or error).
    async fn command(&mut self, command: &[u8]) -> Result<(), Error> {
        self.sequence = 0;
        self.write_packet(command).await?;
        let answer = self.read_packet().await?;
        match answer.first() {
            Some(0x00) => Ok(()),
            Some(&ERROR_PACKET) => Err(self.error_from_packet(&answer, self.capabilities)),
            _ => Err(unexpected(&answer)),
        }
    }

    /// Waits until at least one event (or the end of the stream) can be handed out, then puts
    /// every complete event read so far into `batch` (emptied first). Returns what ended the
    /// stream, if it ended after these events. Fails with [`ReadFailure::Idle`] only when no
    /// byte at all arrived for `idle_timeout`: the timer restarts with every read, so an
    /// event larger than what the link carries in `idle_timeout` still gets through.
    /// Cancel-safe (module docs).
    pub(crate) async fn read_batch(
        &mut self,
        batch: &mut EventBatch,
        idle_timeout: Duration,
    ) -> Result<Option<StreamEnd>, ReadFailure> {
        batch.clear();
        loop {
            let end = self.frame_into(batch);
            if !batch.is_empty() || end.is_some() {
                return Ok(end);
            }
            match tokio::time::timeout(idle_timeout, self.read_more()).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => return Err(ReadFailure::Connection(error)),
                Err(_elapsed) => return Err(ReadFailure::Idle),
            }
        }
    }

    /// Like [`ReplicationConnection::read_batch`] without waiting: `Ok(None)` with an empty
    /// batch when no complete event has arrived yet. Used for the first look before a
    /// timer is started.
    pub(crate) fn try_read_batch(
        &mut self,
        batch: &mut EventBatch,
    ) -> Result<Option<StreamEnd>, Error> {
        batch.clear();
        let end = self.frame_into(batch);
        if !batch.is_empty() || end.is_some() {
            return Ok(end);
        }
        // Whatever the socket already holds, without waiting.
        loop {
            self.reserve_for_read();
            match self.socket.try_read_buf(&mut self.buffer) {
                Ok(0) => return Err(DriverError::ConnectionClosed.into()),
                Ok(_) => {
                    let end = self.frame_into(batch);
                    if !batch.is_empty() || end.is_some() {
                        return Ok(end);
                    }
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(error) => return Err(io_error(error)),
            }
        }
    }

    /// Moves every complete event packet at the start of the buffer into `batch`: the
    /// buffer becomes the batch's bytes and the unfinished rest moves into the batch's old
    /// buffer, which becomes the connection's. Stops at an error or EOF packet and returns
    /// it (events before it stay in the batch).
    fn frame_into(&mut self, batch: &mut EventBatch) -> Option<StreamEnd> {
        let mut offset = 0;
        let mut end = None;
        loop {
            let packet = match self.complete_packet_at(offset) {
                Ok(Some(packet)) => packet,
                Ok(None) => break,
                Err(error) => {
                    // The events before the bad packet are handed out, then the error.
                    end = Some(StreamEnd::Failed(error));
                    break;
                }
            };
            let first = self.buffer.get(packet.payload.start).copied();
            match first {
                Some(EVENT_PACKET) => {
                    let event = packet.payload.start + 1..packet.payload.end;
                    batch.event_bytes += event.len();
                    batch.events.push(event);
                }
                Some(ERROR_PACKET) => {
                    let payload = &self.buffer[packet.payload.clone()];
                    end = Some(StreamEnd::Failed(
                        self.error_from_packet(payload, self.capabilities),
                    ));
                }
                Some(EOF_PACKET) if packet.payload.len() < 8 => end = Some(StreamEnd::Ended),
                _ => {
                    end = Some(StreamEnd::Failed(unexpected(
                        &self.buffer[packet.payload.clone()],
                    )))
                }
            }
            offset = packet.next;
            if end.is_some() {
                break;
            }
        }
        if offset > 0 {
            // The batch takes the buffer; the unfinished packet (if any) moves to the
            // batch's old buffer, which the connection reads into next.
            let mut rest = std::mem::take(&mut batch.bytes);
            rest.clear();
            rest.extend_from_slice(&self.buffer[offset..]);
            self.buffer.truncate(offset);
            batch.bytes = std::mem::replace(&mut self.buffer, rest);
        }
        end
    }

    /// The logical packet starting at `offset` in the buffer, if all of it has arrived.
    /// A packet in several parts (each `MAX_PHYSICAL_PAYLOAD` long but the last) is joined
    /// in place: the later parts' headers are removed so the payload is contiguous. Checks
    /// and advances the sequence id.
    fn complete_packet_at(&mut self, offset: usize) -> Result<Option<FramedPacket>, Error> {
        // First pass: is the whole logical packet here?
        let mut cursor = offset;
        let mut parts = 0_usize;
        let mut total = 0_usize;
        loop {
            let Some(header) = self.buffer.get(cursor..cursor + PACKET_HEADER_LEN) else {
                return Ok(None);
            };
            let length = part_length(header);
            let sequence = header[3];
            let expected = self.sequence.wrapping_add(parts as u8);
            if sequence != expected {
                return Err(DriverError::PacketOutOfOrder.into());
            }
            total += length;
            if total > self.max_packet {
                return Err(DriverError::PacketTooLarge.into());
            }
            let part_end = cursor + PACKET_HEADER_LEN + length;
            if self.buffer.len() < part_end {
                // Relative to `offset`: the unfinished packet moves to the buffer's start.
                self.needed = part_end - offset;
                return Ok(None);
            }
            parts += 1;
            cursor = part_end;
            if length < MAX_PHYSICAL_PAYLOAD {
                break;
            }
        }
        self.sequence = self.sequence.wrapping_add(parts as u8);
        self.needed = 0;
        let payload_start = offset + PACKET_HEADER_LEN;
        if parts > 1 {
            // Join the parts: move each later part's payload over the headers before it.
            let mut write = payload_start + MAX_PHYSICAL_PAYLOAD;
            let mut read = write;
            for _ in 1..parts {
                let length = part_length(&self.buffer[read..read + PACKET_HEADER_LEN]);
                self.buffer.copy_within(
                    read + PACKET_HEADER_LEN..read + PACKET_HEADER_LEN + length,
                    write,
                );
                write += length;
                read += PACKET_HEADER_LEN + length;
            }
            return Ok(Some(FramedPacket {
                payload: payload_start..write,
                next: cursor,
            }));
        }
        Ok(Some(FramedPacket {
            payload: payload_start..cursor,
            next: cursor,
        }))
    }

    /// Makes room for the next socket read: at least half a `READ_CHUNK`, and all of the
    /// unfinished packet part whose size is known (see `needed`).
    fn reserve_for_read(&mut self) {
        let missing = self.needed.saturating_sub(self.buffer.len());
        let free = self.buffer.capacity() - self.buffer.len();
        if free >= missing.max(READ_CHUNK / 2) {
            return;
        }
        if missing > 0 && self.needed > MAX_PHYSICAL_PAYLOAD {
            // Later parts of a logical packet of 16 MiB or more: at least double, so a
            // 1 GiB event costs a few reallocations, not one per 16 MiB part.
            self.buffer.reserve(missing);
        } else {
            self.buffer.reserve_exact(missing.max(READ_CHUNK));
        }
    }

    /// Reads what the socket has (waiting for at least one byte).
    async fn read_more(&mut self) -> Result<(), Error> {
        self.reserve_for_read();
        match self.socket.read_buf(&mut self.buffer).await {
            Ok(0) => Err(DriverError::ConnectionClosed.into()),
            Ok(_) => Ok(()),
            Err(error) => Err(io_error(error)),
        }
    }

    /// Reads one whole packet during the setup (handshake, command answers) and returns its
    /// payload.
    async fn read_packet(&mut self) -> Result<Vec<u8>, Error> {
        loop {
            if let Some(packet) = self.complete_packet_at(0)? {
                let payload = self.buffer[packet.payload].to_vec();
                self.buffer.drain(..packet.next);
                return Ok(payload);
            }
            self.read_more().await?;
        }
    }

    /// Writes `payload` as one logical packet (split into parts when it is 16 MiB or
    /// more), continuing the sequence.
    async fn write_packet(&mut self, payload: &[u8]) -> Result<(), Error> {
        let mut bytes = Vec::with_capacity(payload.len() + PACKET_HEADER_LEN);
        let mut chunks = payload.chunks(MAX_PHYSICAL_PAYLOAD).peekable();
        let mut last_length = 0;
        while let Some(chunk) = chunks.next() {
            push_header(&mut bytes, chunk.len(), self.sequence);
            bytes.extend_from_slice(chunk);
            self.sequence = self.sequence.wrapping_add(1);
            last_length = chunk.len();
            if chunks.peek().is_none() {
                break;
            }
        }
        if payload.is_empty() || last_length == MAX_PHYSICAL_PAYLOAD {
            // An empty packet ends a payload that is a multiple of the part size (or is the
            // whole of an empty payload).
            push_header(&mut bytes, 0, self.sequence);
            self.sequence = self.sequence.wrapping_add(1);
        }
        self.socket.write_all(&bytes).await.map_err(io_error)
    }

    /// A server error packet as the client library's error.
    fn error_from_packet(&self, payload: &[u8], capabilities: CapabilityFlags) -> Error {
        match ParseBuf(payload).parse::<ErrPacket>(capabilities) {
            Ok(ErrPacket::Error(error)) => Error::from(error),
            _ => unexpected(payload),
        }
    }
}

/// A whole logical packet in the buffer.
struct FramedPacket {
    /// Its payload (parts joined).
    payload: Range<usize>,
    /// Where the next packet starts.
    next: usize,
}

/// The payload length a 4-byte packet header states (3 bytes, little-endian).
fn part_length(header: &[u8]) -> usize {
    usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16
}

/// Appends a packet header.
pub(super) fn push_header(bytes: &mut Vec<u8>, length: usize, sequence: u8) {
    let length = u32::try_from(length).unwrap_or(u32::MAX).to_le_bytes();
    bytes.extend_from_slice(&[length[0], length[1], length[2], sequence]);
}

/// `caching_sha2_password` full authentication over a plain connection: the password with a
/// zero terminator, XOR the nonce, RSA-OAEP encrypted with the server's public key.
fn encrypt_password(
    password: Option<&str>,
    nonce: &[u8],
    key: Option<&[u8]>,
) -> Result<Vec<u8>, Error> {
    let key = key
        .filter(|key| !key.is_empty())
        .ok_or_else(|| definite("caching_sha2_password: the server sent no public key".into()))?;
    let mut block = password.unwrap_or_default().as_bytes().to_vec();
    block.push(0);
    if !nonce.is_empty() {
        for (index, byte) in block.iter_mut().enumerate() {
            *byte ^= nonce[index % nonce.len()];
        }
    }
    // mysql_common's RSA code panics on a key it cannot parse; a broken key from the server
    // must be an error, not a crash of the relay.
    std::panic::catch_unwind(|| mysql_common::crypto::encrypt(&block, key)).map_err(|_| {
        definite("caching_sha2_password: the server's RSA public key cannot be used".into())
    })
}

/// A failed TLS handshake: a certificate or protocol refusal is definite (the same
/// certificate fails the same way next time) and names the mode and the cause; a broken
/// connection stays an I/O error (transient). `ca_file`: the configured `tls.ca_file`.
fn tls_handshake_error(error: std::io::Error, host: &str, ca_file: Option<&Path>) -> Error {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(cause) => tls_refusal(describe_tls_failure(host, cause, ca_file)),
        None => io_error(error),
    }
}

/// A rustls refusal as a sentence with the likely fix; `ca_file` is the configured
/// `tls.ca_file`, which the hint names only when it is set.
pub(crate) fn describe_tls_failure(
    host: &str,
    cause: &rustls::Error,
    ca_file: Option<&Path>,
) -> String {
    let unknown_issuer;
    let hint = match cause {
        rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
            unknown_issuer = match ca_file {
                Some(path) => format!(
                    " (the server's certificate is not signed by a CA in tls.ca_file {}: is \
                     it the CA that issued the server's certificate?)",
                    path.display()
                ),
                None => " (no tls.ca_file is set, so the certificate was checked against the \
                         built-in Mozilla root certificates, which do not know a private CA: \
                         set tls.ca_file to the CA that issued the server's certificate)"
                    .to_owned(),
            };
            unknown_issuer.as_str()
        }
        rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName
            | rustls::CertificateError::NotValidForNameContext { .. },
        ) => {
            " (the certificate does not name the host of the URL; connect by a name the \
             certificate lists, or use tls.mode = verify_ca)"
        }
        _ => "",
    };
    format!("TLS handshake with {host} failed: {cause:?}: {cause}{hint}")
}

/// Why TLS was refused (the mode needs TLS the server does not offer, or the handshake
/// failed on a certificate or protocol check): carried inside the I/O error so the endpoint
/// reports it as [`crate::BinlogError::Tls`], a definite error naming the mode.
#[derive(Debug)]
pub(crate) struct TlsRefusal(pub(crate) String);

impl std::fmt::Display for TlsRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsRefusal {}

fn tls_refusal(message: String) -> Error {
    io_error(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        TlsRefusal(message),
    ))
}

/// A packet that does not belong where it arrived (at most 64 of its bytes are kept).
fn unexpected(payload: &[u8]) -> Error {
    DriverError::UnexpectedPacket {
        payload: payload.iter().take(64).copied().collect(),
    }
    .into()
}

/// An error the reader classifies as definite (an `InvalidInput` I/O error: retrying the
/// same request fails the same way), with `message` as its text.
fn definite(message: String) -> Error {
    io_error(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        message,
    ))
}

/// An I/O error as the client library reports it.
fn io_error(error: std::io::Error) -> Error {
    Error::Io(IoError::Io(error))
}

#[cfg(test)]
mod tests {
    use super::super::fake_server::{fake_server, packet, OK};
    use super::*;

    /// A connection-less framer: the framing functions only touch `buffer` and `sequence`.
    async fn framer(bytes: Vec<u8>) -> (ReplicationConnection, tokio::net::TcpListener) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let socket = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let connection = ReplicationConnection {
            socket: Transport::Plain(socket),
            tls_session: None,
            buffer: bytes,
            sequence: 1,
            capabilities: CapabilityFlags::CLIENT_PROTOCOL_41,
            max_packet: 1 << 30,
            needed: 0,
        };
        (connection, listener)
    }

    #[tokio::test]
    async fn a_large_event_arriving_slowly_is_not_idle_but_silence_is() {
        let (mut connection, listener) = framer(Vec::new()).await;
        let (mut server, _) = listener.accept().await.unwrap();
        let mut payload = vec![0u8];
        payload.extend((0..2_000_000).map(|i| (i % 253) as u8));
        let bytes = packet(1, &payload);
        // 2 MB in 100 KB pieces every 50 ms: about a second in all, more than twice the
        // 400 ms idle timeout, but never 400 ms without a byte.
        let writer = tokio::spawn(async move {
            for piece in bytes.chunks(100_000) {
                server.write_all(piece).await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            server
        });
        let idle = std::time::Duration::from_millis(400);
        let mut batch = EventBatch::default();
        let end = connection.read_batch(&mut batch, idle).await.unwrap();
        assert!(end.is_none());
        assert_eq!(batch.len(), 1);
        assert_eq!(batch.get(0), Some(&payload[1..]));
        // Then the server falls silent (the socket stays open): idle after the timeout.
        let _server = writer.await.unwrap();
        let started = std::time::Instant::now();
        assert!(matches!(
            connection.read_batch(&mut batch, idle).await,
            Err(ReadFailure::Idle)
        ));
        assert!(started.elapsed() >= idle);
    }

    #[tokio::test]
    async fn events_are_framed_and_an_unfinished_packet_waits() {
        let mut bytes = packet(1, b"\x00first-event");
        bytes.extend(packet(2, b"\x00second"));
        let third = packet(3, b"\x00third-event-cut");
        bytes.extend_from_slice(&third[..7]);
        let (mut connection, _listener) = framer(bytes).await;
        let mut batch = EventBatch::default();
        assert!(connection.frame_into(&mut batch).is_none());
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.get(0), Some(&b"first-event"[..]));
        assert_eq!(batch.get(1), Some(&b"second"[..]));
        assert_eq!(batch.event_bytes(), 17);
        // The cut packet stayed in the connection's buffer, whole once the rest arrives.
        connection.buffer.extend_from_slice(&third[7..]);
        let mut next = EventBatch::default();
        assert!(connection.frame_into(&mut next).is_none());
        assert_eq!(next.get(0), Some(&b"third-event-cut"[..]));
        assert!(connection.buffer.is_empty());
    }

    #[tokio::test]
    async fn a_packet_in_parts_is_joined() {
        let mut payload = vec![0u8];
        payload.extend((0..MAX_PHYSICAL_PAYLOAD + 10).map(|i| (i % 251) as u8));
        let mut bytes = packet(1, &payload[..MAX_PHYSICAL_PAYLOAD]);
        bytes.extend(packet(2, &payload[MAX_PHYSICAL_PAYLOAD..]));
        bytes.extend(packet(3, b"\x00after"));
        let (mut connection, _listener) = framer(bytes).await;
        let mut batch = EventBatch::default();
        assert!(connection.frame_into(&mut batch).is_none());
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.get(0), Some(&payload[1..]));
        assert_eq!(batch.get(1), Some(&b"after"[..]));
        assert_eq!(connection.sequence, 4);
    }

    #[tokio::test]
    async fn a_lost_packet_is_an_error_not_a_misread_event() {
        let mut bytes = packet(1, b"\x00one");
        bytes.extend(packet(3, b"\x00three"));
        let (mut connection, _listener) = framer(bytes).await;
        let mut batch = EventBatch::default();
        let end = connection.frame_into(&mut batch);
        assert!(
            matches!(
                end,
                Some(StreamEnd::Failed(Error::Driver(
                    DriverError::PacketOutOfOrder
                )))
            ),
            "{end:?}"
        );
        // The event before the lost packet is still handed out.
        assert_eq!(batch.get(0), Some(&b"one"[..]));
    }

    #[tokio::test]
    async fn an_error_packet_ends_the_stream_after_the_events_before_it() {
        let mut bytes = packet(1, b"\x00event");
        let mut error_payload = vec![0xFF];
        error_payload.extend_from_slice(&1236_u16.to_le_bytes());
        error_payload.extend_from_slice(b"#HY000Could not find first log file name");
        bytes.extend(packet(2, &error_payload));
        let (mut connection, _listener) = framer(bytes).await;
        let mut batch = EventBatch::default();
        let end = connection.frame_into(&mut batch);
        assert_eq!(batch.len(), 1);
        match end {
            Some(StreamEnd::Failed(Error::Server(error))) => {
                assert_eq!(error.code, 1236);
                assert!(error.message.contains("first log file"), "{error:?}");
            }
            other => panic!("expected the server error, got {other:?}"),
        }
        let mut eof = EventBatch::default();
        let (mut ended, _listener) = framer(packet(1, b"\xFE\x00\x00\x02\x00")).await;
        assert!(matches!(ended.frame_into(&mut eof), Some(StreamEnd::Ended)));
    }

    #[tokio::test]
    async fn a_packet_above_the_limit_is_refused_before_it_is_buffered() {
        let mut header = Vec::new();
        push_header(&mut header, 1000, 1);
        let (mut connection, _listener) = framer(header).await;
        connection.max_packet = 100;
        let mut batch = EventBatch::default();
        assert!(matches!(
            connection.frame_into(&mut batch),
            Some(StreamEnd::Failed(Error::Driver(
                DriverError::PacketTooLarge
            )))
        ));
    }

    /// A 2048-bit RSA public key, as a MySQL 8 server sends it for full authentication.
    const SERVER_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAwcrEs3/+4DU9alKZTY9v
F065wKi7l8y+fwntFXB0sOWkD3U9kQeFWWHad1YI+7gaxZlj8YSn9/vH2m1xugJh
i0o/398VcUQIGRb4JNq+Mi6fVwoHtHDjaOHvpBKBIPb7VnnPjJ1TrPDjB+y+npSQ
Hrx4qwFG2h8JnvfZZhfIp9IA3QP0t5JXYm5+EdD4j7bnrQTPieWqRJqTBFuyweND
gi3oIwH7CdcD8axY1SINnAEqD6mGaGsAF1QG5jADDLECbfM1B6o0bd4Ek2H/IdGv
eybdm9+iBoze8BT89lRNHEYhIRmj4I9h8m+NA3TDnn1bZ99FeHRC2xDKuX6+vFwn
NQIDAQAB
-----END PUBLIC KEY-----
";

    #[tokio::test]
    async fn mysql_8_full_caching_sha2_authentication_sends_the_rsa_encrypted_password() {
        let (url, server) = fake_server(|mut server| async move {
            let nonce = server.greet("8.4.0", "caching_sha2_password").await;
            let response = server.receive(1).await;
            let scramble = mysql_common::scramble::scramble_sha256(&nonce, b"secret").unwrap();
            assert!(
                response.windows(32).any(|window| window == scramble),
                "the response carries the SHA-256 scramble"
            );
            assert!(response.windows(5).any(|window| window == b"relay"));
            // The server's cache does not know the user: full authentication.
            server.send(2, &[0x01, 0x04]).await;
            assert_eq!(server.receive(3).await, [0x02], "asks for the public key");
            let mut key = vec![0x01];
            key.extend_from_slice(SERVER_PUBLIC_KEY.as_bytes());
            server.send(4, &key).await;
            assert_eq!(server.receive(5).await.len(), 256, "RSA-2048 block");
            server.send(6, OK).await;
            let query = server.receive(0).await;
            assert_eq!(query[0], Command::COM_QUERY as u8);
            assert_eq!(&query[1..], b"SET @x=1");
            server.send(1, OK).await;
        })
        .await;
        let opts = Opts::from_url(&url).unwrap();
        let security = ConnectSecurity {
            allow_public_key_retrieval: true,
            ..ConnectSecurity::default()
        };
        let mut connection = ReplicationConnection::open(&opts, &security).await.unwrap();
        connection.execute("SET @x=1").await.unwrap();
        server.await.unwrap();
    }

    #[tokio::test]
    async fn full_caching_sha2_authentication_over_plaintext_without_a_key_source_is_refused() {
        let (url, server) = fake_server(|mut server| async move {
            server.greet("8.4.0", "caching_sha2_password").await;
            server.receive(1).await;
            server.send(2, &[0x01, 0x04]).await;
            // The client must not ask for the key (nor send anything): it hangs up.
            server.expect_closed().await;
        })
        .await;
        let opts = Opts::from_url(&url).unwrap();
        let error = ReplicationConnection::open(&opts, &ConnectSecurity::default())
            .await
            .err()
            .unwrap()
            .to_string();
        for fix in [
            "tls.mode",
            "tls.server_public_key_path",
            "allow_public_key_retrieval",
        ] {
            assert!(error.contains(fix), "{error}");
        }
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_pinned_server_key_is_used_without_asking_the_server() {
        let (url, server) = fake_server(|mut server| async move {
            server.greet("8.4.0", "caching_sha2_password").await;
            server.receive(1).await;
            server.send(2, &[0x01, 0x04]).await;
            // Straight to the encrypted password: no 0x02 key request.
            assert_eq!(server.receive(3).await.len(), 256, "RSA-2048 block");
            server.send(4, OK).await;
        })
        .await;
        let opts = Opts::from_url(&url).unwrap();
        let security = ConnectSecurity {
            pinned_server_key: Some(SERVER_PUBLIC_KEY.as_bytes().to_vec()),
            ..ConnectSecurity::default()
        };
        ReplicationConnection::open(&opts, &security).await.unwrap();
        server.await.unwrap();
    }

    #[tokio::test]
    async fn mariadb_ed25519_authentication_signs_the_nonce() {
        let (url, server) = fake_server(|mut server| async move {
            server
                .greet("5.5.5-10.11.6-MariaDB", "mysql_native_password")
                .await;
            server.receive(1).await;
            let nonce = [7u8; 32];
            let mut switch = vec![0xFE];
            switch.extend_from_slice(b"client_ed25519\0");
            switch.extend_from_slice(&nonce);
            server.send(2, &switch).await;
            let signature = server.receive(3).await;
            assert_eq!(
                signature,
                mysql_common::scramble::create_response_for_ed25519(b"secret", &nonce),
                "the Ed25519 signature of the nonce with the password-derived key"
            );
            server.send(4, OK).await;
        })
        .await;
        let opts = Opts::from_url(&url).unwrap();
        ReplicationConnection::open(&opts, &ConnectSecurity::default())
            .await
            .unwrap();
        server.await.unwrap();
    }

    #[tokio::test]
    async fn an_auth_switch_is_answered_with_the_new_plugin_and_nonce() {
        let (url, server) = fake_server(|mut server| async move {
            server
                .greet("10.11.6-MariaDB", "mysql_native_password")
                .await;
            let _response = server.receive(1).await;
            let nonce = *b"ZYXWVUTSRQPONMLKJIHG";
            let mut switch = Vec::new();
            AuthSwitchRequest::new(&b"mysql_native_password"[..], &nonce[..])
                .serialize(&mut switch);
            server.send(2, &switch).await;
            let answer = server.receive(3).await;
            let expected = mysql_common::scramble::scramble_native(&nonce, b"secret").unwrap();
            assert_eq!(answer, expected, "scrambled with the switch's nonce");
            // A wrong password after all: the server's error comes back with its code.
            let mut error = vec![0xFF];
            error.extend_from_slice(&1045_u16.to_le_bytes());
            error.extend_from_slice(b"#28000Access denied for user 'relay'");
            server.send(4, &error).await;
        })
        .await;
        let opts = Opts::from_url(&url).unwrap();
        let error = ReplicationConnection::open(&opts, &ConnectSecurity::default())
            .await
            .err()
            .unwrap();
        match error {
            Error::Server(error) => {
                assert_eq!(error.code, 1045);
                assert!(error.message.contains("Access denied"), "{error:?}");
            }
            other => panic!("expected the server's error, got {other:?}"),
        }
        server.await.unwrap();
    }

    #[tokio::test]
    async fn an_unsupported_plugin_is_a_definite_error_naming_it() {
        let (url, server) = fake_server(|mut server| async move {
            server
                .greet("10.11.6-MariaDB", "mysql_native_password")
                .await;
            let _response = server.receive(1).await;
            let mut switch = Vec::new();
            AuthSwitchRequest::new(
                &b"auth_gssapi_client"[..],
                &b"0123456789abcdef0123456789abcdef"[..],
            )
            .serialize(&mut switch);
            server.send(2, &switch).await;
        })
        .await;
        let opts = Opts::from_url(&url).unwrap();
        let error = ReplicationConnection::open(&opts, &ConnectSecurity::default())
            .await
            .err()
            .unwrap();
        assert!(error.to_string().contains("auth_gssapi_client"), "{error}");
        server.await.unwrap();
    }

    #[test]
    fn a_broken_server_key_is_an_error() {
        let error = encrypt_password(Some("secret"), b"12345678901234567890", Some(b"garbage"))
            .unwrap_err();
        assert!(error.to_string().contains("RSA"), "{error}");
    }
}
