// The raw HTTP/2 client of http2_raw_client.h: one non-blocking TLS socket
// (OpenSSL), a frame writer, a frame reader, and the small HPACK decoder the
// server's answers need. Test-only; written for clarity, not speed.
#include "tests/http2_raw_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "openssl/err.h"
#include "openssl/ssl.h"

namespace tessera {
namespace testing {
namespace {

// Frame types and flags (RFC 9113 section 6).
constexpr uint8_t kData = 0x0;
constexpr uint8_t kHeaders = 0x1;
constexpr uint8_t kRstStream = 0x3;
constexpr uint8_t kSettings = 0x4;
constexpr uint8_t kGoaway = 0x7;
constexpr uint8_t kContinuation = 0x9;
constexpr uint8_t kEndStream = 0x1;
constexpr uint8_t kAck = 0x1;
constexpr uint8_t kEndHeaders = 0x4;
constexpr uint8_t kPadded = 0x8;
constexpr uint8_t kPriority = 0x20;
constexpr uint32_t kStream = 1;  // the one stream each connection opens
constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, absl::string_view payload) {
  std::string out;
  const uint32_t n = static_cast<uint32_t>(payload.size());
  out.push_back(static_cast<char>(n >> 16));
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(n));
  out.push_back(static_cast<char>(type));
  out.push_back(static_cast<char>(flags));
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(stream >> shift));
  out.append(payload.data(), payload.size());
  return out;
}

// An HPACK integer with an N-bit prefix (RFC 7541 section 5.1); `first`
// holds the representation's high bits.
void AppendInteger(std::string* out, uint8_t first, int prefix_bits, uint64_t value) {
  const uint64_t max_prefix = (1u << prefix_bits) - 1;
  if (value < max_prefix) {
    out->push_back(static_cast<char>(first | value));
    return;
  }
  out->push_back(static_cast<char>(first | max_prefix));
  value -= max_prefix;
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// A literal field without indexing, new name, no Huffman coding.
void AppendLiteral(std::string* out, absl::string_view name, absl::string_view value) {
  out->push_back(0x00);
  AppendInteger(out, 0x00, 7, name.size());
  out->append(name.data(), name.size());
  AppendInteger(out, 0x00, 7, value.size());
  out->append(value.data(), value.size());
}

std::string EncodeBlock(const std::vector<HeaderField>& fields) {
  std::string block;
  for (const auto& [name, value] : fields) AppendLiteral(&block, name, value);
  return block;
}

// The static table's names (RFC 7541 appendix A), for the size of entries
// the server indexes; values of static entries are never needed here.
constexpr const char* kStaticNames[] = {
    ":authority", ":method", ":method", ":path", ":path", ":scheme", ":scheme", ":status",
    ":status", ":status", ":status", ":status", ":status", ":status", "accept-charset",
    "accept-encoding", "accept-language", "accept-ranges", "accept",
    "access-control-allow-origin", "age", "allow", "authorization", "cache-control",
    "content-disposition", "content-encoding", "content-language", "content-length",
    "content-location", "content-range", "content-type", "cookie", "date", "etag", "expect",
    "expires", "from", "host", "if-match", "if-modified-since", "if-none-match", "if-range",
    "if-unmodified-since", "last-modified", "link", "location", "max-forwards",
    "proxy-authenticate", "proxy-authorization", "range", "referer", "refresh", "retry-after",
    "server", "set-cookie", "strict-transport-security", "transfer-encoding", "user-agent",
    "vary", "via", "www-authenticate"};
constexpr uint64_t kStaticEntries = sizeof(kStaticNames) / sizeof(kStaticNames[0]);

// Decodes the server's header blocks, keeping the dynamic table across
// blocks of one connection. Huffman-coded strings come out as "<huffman>":
// gRPC's encoder sends grpc-status and grpc-message without Huffman coding.
class HpackDecoder {
 public:
  bool Decode(absl::string_view block, std::vector<HeaderField>* out) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(block.data());
    const uint8_t* end = p + block.size();
    while (p < end) {
      const uint8_t b = *p;
      uint64_t index = 0;
      if (b & 0x80) {  // indexed field
        if (!ReadInteger(&p, end, 7, &index)) return false;
        HeaderField field;
        if (!Lookup(index, &field)) return false;
        out->push_back(field);
      } else if ((b & 0xe0) == 0x20) {  // dynamic table size update
        if (!ReadInteger(&p, end, 5, &index)) return false;
        max_size_ = index;
        Evict();
      } else {
        const bool add = (b & 0xc0) == 0x40;
        if (!ReadInteger(&p, end, add ? 6 : 4, &index)) return false;
        HeaderField field;
        if (index == 0) {
          if (!ReadString(&p, end, &field.first)) return false;
        } else if (!Lookup(index, &field)) {
          return false;
        }
        if (!ReadString(&p, end, &field.second)) return false;
        if (add) Insert(field);
        out->push_back(std::move(field));
      }
    }
    return true;
  }

 private:
  static bool ReadInteger(const uint8_t** p, const uint8_t* end, int prefix_bits,
                          uint64_t* value) {
    if (*p >= end) return false;
    const uint64_t max_prefix = (1u << prefix_bits) - 1;
    uint64_t v = *(*p)++ & max_prefix;
    if (v < max_prefix) {
      *value = v;
      return true;
    }
    for (int shift = 0; *p < end && shift < 56; shift += 7) {
      const uint8_t b = *(*p)++;
      v += static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *value = v;
        return true;
      }
    }
    return false;
  }

  static bool ReadString(const uint8_t** p, const uint8_t* end, std::string* out) {
    if (*p >= end) return false;
    const bool huffman = (**p & 0x80) != 0;
    uint64_t length = 0;
    if (!ReadInteger(p, end, 7, &length) || length > static_cast<uint64_t>(end - *p)) {
      return false;
    }
    *out = huffman ? "<huffman>" : std::string(reinterpret_cast<const char*>(*p), length);
    *p += length;
    return true;
  }

  bool Lookup(uint64_t index, HeaderField* field) const {
    if (index == 0) return false;
    if (index <= kStaticEntries) {
      *field = {kStaticNames[index - 1], ""};
      return true;
    }
    const uint64_t dynamic = index - kStaticEntries - 1;
    if (dynamic >= table_.size()) return false;
    *field = table_[dynamic];
    return true;
  }

  void Insert(const HeaderField& field) {
    table_.push_front(field);
    size_ += field.first.size() + field.second.size() + 32;
    Evict();
  }

  void Evict() {
    while (size_ > max_size_ && !table_.empty()) {
      size_ -= table_.back().first.size() + table_.back().second.size() + 32;
      table_.pop_back();
    }
  }

  std::deque<HeaderField> table_;
  uint64_t size_ = 0;
  uint64_t max_size_ = 4096;
};

// One non-blocking TLS connection with ALPN "h2".
class TlsConnection {
 public:
  enum class Io { kOk, kTimeout, kClosed };

  static absl::StatusOr<std::unique_ptr<TlsConnection>> Open(const std::string& host, int port,
                                                             absl::Duration timeout) {
    signal(SIGPIPE, SIG_IGN);  // a server that closes on us shows up as EPIPE
    const absl::Time deadline = absl::Now() + timeout;
    auto conn = std::unique_ptr<TlsConnection>(new TlsConnection());
    conn->fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (conn->fd_ < 0) return absl::InternalError("socket() failed");
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", host));
    }
    if (connect(conn->fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return absl::UnavailableError(absl::StrCat("connect ", host, ":", port, ": ",
                                                 std::strerror(errno)));
    }
    const int one = 1;
    setsockopt(conn->fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(conn->fd_, F_SETFL, fcntl(conn->fd_, F_GETFL) | O_NONBLOCK);

    conn->ctx_ = SSL_CTX_new(TLS_client_method());
    if (conn->ctx_ == nullptr) return absl::InternalError("SSL_CTX_new failed");
    SSL_CTX_set_verify(conn->ctx_, SSL_VERIFY_NONE, nullptr);
    static const unsigned char kAlpn[] = {2, 'h', '2'};
    SSL_CTX_set_alpn_protos(conn->ctx_, kAlpn, sizeof(kAlpn));
    conn->ssl_ = SSL_new(conn->ctx_);
    SSL_set_mode(conn->ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_set_fd(conn->ssl_, conn->fd_);
    SSL_set_tlsext_host_name(conn->ssl_, "localhost");
    while (true) {
      const int r = SSL_connect(conn->ssl_);
      if (r == 1) break;
      const int err = SSL_get_error(conn->ssl_, r);
      short events = 0;
      if (err == SSL_ERROR_WANT_READ) events = POLLIN;
      if (err == SSL_ERROR_WANT_WRITE) events = POLLOUT;
      if (events == 0 || !conn->Wait(events, deadline)) {
        char reason[256] = {0};
        ERR_error_string_n(ERR_get_error(), reason, sizeof(reason));
        return absl::UnavailableError(absl::StrCat("TLS handshake failed: ", reason));
      }
    }
    const unsigned char* alpn = nullptr;
    unsigned int alpn_len = 0;
    SSL_get0_alpn_selected(conn->ssl_, &alpn, &alpn_len);
    if (absl::string_view(reinterpret_cast<const char*>(alpn), alpn_len) != "h2") {
      return absl::UnavailableError("the server did not select ALPN h2");
    }
    return conn;
  }

  ~TlsConnection() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
    if (fd_ >= 0) close(fd_);
  }

  // Writes all of `bytes` by `deadline`, reading whatever the server sends
  // meanwhile into `inbox` (a server that stops reading may have said why).
  Io Write(absl::string_view bytes, absl::Time deadline, std::string* inbox) {
    while (!bytes.empty()) {
      const int chunk = static_cast<int>(std::min<size_t>(bytes.size(), 1 << 16));
      const int r = SSL_write(ssl_, bytes.data(), chunk);
      if (r > 0) {
        bytes.remove_prefix(r);
        continue;
      }
      const int err = SSL_get_error(ssl_, r);
      if (err != SSL_ERROR_WANT_WRITE && err != SSL_ERROR_WANT_READ) return Io::kClosed;
      if (absl::Now() >= deadline) return Io::kTimeout;
      pollfd pfd = {fd_, static_cast<short>(POLLOUT | POLLIN), 0};
      poll(&pfd, 1, 50);
      if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
        if (Read(inbox, absl::ZeroDuration()) == Io::kClosed) return Io::kClosed;
      }
    }
    return Io::kOk;
  }

  // Appends what arrives within `wait` (at least what is already there).
  Io Read(std::string* inbox, absl::Duration wait) {
    const absl::Time deadline = absl::Now() + wait;
    char buf[1 << 16];
    bool got = false;
    while (true) {
      const int r = SSL_read(ssl_, buf, sizeof(buf));
      if (r > 0) {
        inbox->append(buf, r);
        got = true;
        continue;
      }
      const int err = SSL_get_error(ssl_, r);
      if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) return Io::kClosed;
      if (got || absl::Now() >= deadline) return Io::kOk;
      if (!Wait(POLLIN, deadline)) return Io::kOk;
    }
  }

 private:
  TlsConnection() = default;

  bool Wait(short events, absl::Time deadline) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd pfd = {fd_, events, 0};
    return poll(&pfd, 1, static_cast<int>(std::min<int64_t>(ms, 1000))) > 0 ||
           absl::Now() < deadline;
  }

  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
};

// Splits the server's bytes into frames and records what they say.
class FrameReader {
 public:
  explicit FrameReader(Http2Outcome* outcome) : outcome_(outcome) {}

  // Consumes the complete frames at the front of `inbox`. Returns true once
  // the call on our stream has ended (trailers or reset) or GOAWAY came.
  bool Consume(std::string* inbox) {
    size_t at = 0;
    while (inbox->size() - at >= 9) {
      const auto* h = reinterpret_cast<const uint8_t*>(inbox->data() + at);
      const size_t length = (size_t{h[0]} << 16) | (size_t{h[1]} << 8) | h[2];
      if (inbox->size() - at < 9 + length) break;
      const uint8_t type = h[3];
      const uint8_t flags = h[4];
      const uint32_t stream = ((uint32_t{h[5]} << 24) | (uint32_t{h[6]} << 16) |
                               (uint32_t{h[7]} << 8) | h[8]) & 0x7fffffff;
      Handle(type, flags, stream, absl::string_view(inbox->data() + at + 9, length));
      at += 9 + length;
    }
    inbox->erase(0, at);
    return ended_ || outcome_->goaway;
  }

  bool saw_settings() const { return saw_settings_; }

 private:
  static uint32_t U32(absl::string_view p) {
    const auto* b = reinterpret_cast<const uint8_t*>(p.data());
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  }

  void Handle(uint8_t type, uint8_t flags, uint32_t stream, absl::string_view payload) {
    switch (type) {
      case kSettings:
        if (!(flags & kAck)) saw_settings_ = true;
        break;
      case kGoaway:
        if (payload.size() >= 8) {
          outcome_->goaway = true;
          outcome_->goaway_error = U32(payload.substr(4));
        }
        break;
      case kRstStream:
        if (payload.size() >= 4 && stream == kStream) {
          outcome_->rst_stream = true;
          outcome_->rst_stream_error = U32(payload);
          ended_ = true;
        }
        break;
      case kHeaders: {
        if (flags & kPadded) {
          if (payload.empty()) return;
          const size_t pad = static_cast<uint8_t>(payload[0]);
          payload.remove_prefix(1);
          if (pad > payload.size()) return;
          payload.remove_suffix(pad);
        }
        if (flags & kPriority) payload.remove_prefix(std::min<size_t>(5, payload.size()));
        block_.assign(payload.data(), payload.size());
        block_ends_stream_ = (flags & kEndStream) != 0;
        if (flags & kEndHeaders) FinishBlock(stream);
        break;
      }
      case kContinuation:
        block_.append(payload.data(), payload.size());
        if (flags & kEndHeaders) FinishBlock(stream);
        break;
      default:
        break;  // DATA, PING, WINDOW_UPDATE: nothing to record
    }
  }

  void FinishBlock(uint32_t stream) {
    std::vector<HeaderField> fields;
    decoder_.Decode(block_, &fields);
    for (const auto& [name, value] : fields) {
      if (name == "grpc-status") outcome_->grpc_status = std::atoi(value.c_str());
      if (name == "grpc-message") outcome_->grpc_message = value;
    }
    if (stream == kStream && block_ends_stream_) ended_ = true;
    block_.clear();
  }

  Http2Outcome* outcome_;
  HpackDecoder decoder_;
  std::string block_;
  bool block_ends_stream_ = false;
  bool ended_ = false;
  bool saw_settings_ = false;
};

// Opens the connection and sends the preface and an empty SETTINGS; with
// `ack_settings`, waits for the server's SETTINGS and acknowledges them.
absl::StatusOr<std::unique_ptr<TlsConnection>> Start(const std::string& host, int port,
                                                     bool ack_settings, FrameReader* reader,
                                                     std::string* inbox) {
  absl::StatusOr<std::unique_ptr<TlsConnection>> conn =
      TlsConnection::Open(host, port, absl::Seconds(10));
  if (!conn.ok()) return conn.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::string hello = kPreface;
  hello += Frame(kSettings, 0, 0, "");
  if ((*conn)->Write(hello, deadline, inbox) != TlsConnection::Io::kOk) {
    return absl::UnavailableError("the server closed the connection during the preface");
  }
  if (!ack_settings) return conn;
  while (!reader->saw_settings()) {
    if ((*conn)->Read(inbox, deadline - absl::Now()) == TlsConnection::Io::kClosed ||
        absl::Now() >= deadline) {
      return absl::UnavailableError("no SETTINGS from the server");
    }
    reader->Consume(inbox);
  }
  if ((*conn)->Write(Frame(kSettings, kAck, 0, ""), deadline, inbox) !=
      TlsConnection::Io::kOk) {
    return absl::UnavailableError("the server closed the connection before our SETTINGS ack");
  }
  return conn;
}

// Reads the server's frames until the call ends, the connection closes or
// `wait` passes. A GOAWAY is not the end: the server closes the connection
// after it, and whether that close has arrived yet is a race, so keep
// reading until it does (or `wait` passes) rather than report "still open"
// for a connection that is about to close.
void Drain(TlsConnection* conn, FrameReader* reader, std::string* inbox,
           absl::Duration wait, Http2Outcome* outcome) {
  const absl::Time deadline = absl::Now() + wait;
  while (!outcome->closed) {
    if (reader->Consume(inbox) && !outcome->goaway) break;
    if (absl::Now() >= deadline) break;
    if (conn->Read(inbox, std::min(deadline - absl::Now(), absl::Milliseconds(100))) ==
        TlsConnection::Io::kClosed) {
      outcome->closed = true;
    }
  }
  reader->Consume(inbox);
}

const char* Http2ErrorName(uint32_t code) {
  static const char* const kNames[] = {
      "NO_ERROR",       "PROTOCOL_ERROR",      "INTERNAL_ERROR",     "FLOW_CONTROL_ERROR",
      "SETTINGS_TIMEOUT", "STREAM_CLOSED",     "FRAME_SIZE_ERROR",   "REFUSED_STREAM",
      "CANCEL",         "COMPRESSION_ERROR",   "CONNECT_ERROR",      "ENHANCE_YOUR_CALM",
      "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"};
  return code < sizeof(kNames) / sizeof(kNames[0]) ? kNames[code] : "UNKNOWN";
}

}  // namespace

std::string Http2Outcome::Describe() const {
  std::string out = absl::StrCat("sent ", header_bytes_sent, " header bytes in ",
                                 absl::FormatDuration(elapsed));
  if (goaway) absl::StrAppend(&out, "; GOAWAY(", Http2ErrorName(goaway_error), ")");
  if (rst_stream) absl::StrAppend(&out, "; RST_STREAM(", Http2ErrorName(rst_stream_error), ")");
  if (grpc_status.has_value()) {
    absl::StrAppend(&out, "; grpc-status ", *grpc_status, " \"", grpc_message, "\"");
  }
  absl::StrAppend(&out, closed ? "; closed by the server" : "; still open");
  return out;
}

std::vector<HeaderField> GrpcRequestFields(const std::string& authority,
                                           const std::string& method) {
  return {{":method", "POST"},
          {":scheme", "https"},
          {":path", method},
          {":authority", authority},
          {"content-type", "application/grpc"},
          {"te", "trailers"}};
}

absl::StatusOr<Http2Outcome> SendHeaderFlood(const std::string& host, int port,
                                             const std::vector<HeaderField>& prefix,
                                             const FloodOptions& options) {
  Http2Outcome outcome;
  FrameReader reader(&outcome);
  std::string inbox;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<TlsConnection>> conn =
      Start(host, port, options.ack_settings, &reader, &inbox);
  if (!conn.ok()) return conn.status();

  std::string first = EncodeBlock(prefix);
  if (options.shape == FloodShape::kOneEndlessField) {
    // The field's name, then a value length no flood reaches.
    first.push_back(0x00);
    AppendInteger(&first, 0x00, 7, 7);
    first += "x-flood";
    AppendInteger(&first, 0x00, 7, 0xfffffff0u);
  }
  std::string continuation;
  if (options.shape == FloodShape::kOneEndlessField) {
    continuation.assign(options.frame_size, 'a');
  } else {
    std::string field;
    AppendLiteral(&field, "x-flood", std::string(1000, 'a'));
    while (continuation.size() + field.size() <= static_cast<size_t>(options.frame_size)) {
      continuation += field;
    }
  }
  const std::string continuation_frame = Frame(kContinuation, 0, kStream, continuation);

  const absl::Time stop = start + options.max_time;
  std::string pending = Frame(kHeaders, 0, kStream, first);
  int64_t pending_bytes = static_cast<int64_t>(first.size());
  while (true) {
    const TlsConnection::Io io = (*conn)->Write(pending, stop, &inbox);
    if (io == TlsConnection::Io::kClosed) outcome.closed = true;
    if (io != TlsConnection::Io::kOk) break;
    outcome.header_bytes_sent += pending_bytes;
    // A server that keeps reading what it has refused (nginx drains a
    // connection it sent GOAWAY on) never makes a write block, and Write
    // only reads while it waits: look for the server's frames after every
    // write, as a client that honours GOAWAY would.
    const TlsConnection::Io read = (*conn)->Read(&inbox, absl::ZeroDuration());
    reader.Consume(&inbox);
    if (read == TlsConnection::Io::kClosed) {
      outcome.closed = true;
      break;
    }
    if (outcome.goaway || outcome.rst_stream) break;
    if (outcome.header_bytes_sent >= options.max_bytes || absl::Now() >= stop) break;
    // Sixteen frames per write keeps the TLS records full.
    pending.clear();
    pending_bytes = 0;
    for (int i = 0; i < 16 && outcome.header_bytes_sent + pending_bytes < options.max_bytes;
         ++i) {
      pending += continuation_frame;
      pending_bytes += static_cast<int64_t>(continuation.size());
    }
  }
  Drain(conn->get(), &reader, &inbox, options.drain, &outcome);
  outcome.elapsed = absl::Now() - start;
  return outcome;
}

absl::StatusOr<Http2Outcome> SendUnaryCall(const std::string& host, int port,
                                           const std::vector<HeaderField>& fields,
                                           const std::string& message, int frame_size,
                                           bool ack_settings, absl::Duration timeout) {
  Http2Outcome outcome;
  FrameReader reader(&outcome);
  std::string inbox;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<TlsConnection>> conn =
      Start(host, port, ack_settings, &reader, &inbox);
  if (!conn.ok()) return conn.status();

  const std::string block = EncodeBlock(fields);
  std::string frames;
  for (size_t at = 0; at < block.size() || at == 0; at += frame_size) {
    const absl::string_view part = absl::string_view(block).substr(at, frame_size);
    const bool last = at + frame_size >= block.size();
    frames += Frame(at == 0 ? kHeaders : kContinuation, last ? kEndHeaders : 0, kStream, part);
  }
  outcome.header_bytes_sent = static_cast<int64_t>(block.size());
  std::string grpc_message(5, '\0');
  const uint32_t n = static_cast<uint32_t>(message.size());
  for (int i = 0; i < 4; ++i) grpc_message[1 + i] = static_cast<char>(n >> (24 - 8 * i));
  grpc_message += message;
  frames += Frame(kData, kEndStream, kStream, grpc_message);

  const absl::Time deadline = start + timeout;
  if ((*conn)->Write(frames, deadline, &inbox) == TlsConnection::Io::kClosed) {
    outcome.closed = true;
  }
  Drain(conn->get(), &reader, &inbox, deadline - absl::Now(), &outcome);
  outcome.elapsed = absl::Now() - start;
  return outcome;
}

}  // namespace testing
}  // namespace tessera
