// Test-only: a raw HTTP/2-over-TLS client that sends what no gRPC library
// would, so the multi-process tests can check what a server holds for a peer
// that has no credentials. It speaks just enough of HTTP/2 (RFC 9113) and
// HPACK (RFC 7541): header fields go out as literals without Huffman coding
// and without indexing; coming back it reads SETTINGS, PING, GOAWAY,
// RST_STREAM and the header blocks that carry grpc-status. It never verifies
// the server's certificate and presents none of its own, like an attacker.
#ifndef TESSERA_TESTS_HTTP2_RAW_CLIENT_H_
#define TESSERA_TESTS_HTTP2_RAW_CLIENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera {
namespace testing {

using HeaderField = std::pair<std::string, std::string>;

// What the server did with one connection.
struct Http2Outcome {
  int64_t header_bytes_sent = 0;  // HEADERS + CONTINUATION payload written
  bool goaway = false;            // the server sent GOAWAY ...
  uint32_t goaway_error = 0;      // ... with this HTTP/2 error code
  bool rst_stream = false;        // the server reset our stream ...
  uint32_t rst_stream_error = 0;  // ... with this code
  bool closed = false;            // the server closed or reset the connection
  std::optional<int> grpc_status;  // from the server's header blocks
  std::string grpc_message;
  absl::Duration elapsed;
  // "sent 1048576 header bytes in 0.2s; GOAWAY(ENHANCE_YOUR_CALM); closed".
  std::string Describe() const;
};

// The request header fields of a gRPC call to `method`
// ("/tessera.v1.Coordinator/ListWorkers") on `authority` (host:port).
std::vector<HeaderField> GrpcRequestFields(const std::string& authority,
                                           const std::string& method);

// The shape of an endless header block.
enum class FloodShape {
  // One literal field whose declared length is far beyond the flood, its
  // value spread over the CONTINUATION frames: a single header that never
  // ends.
  kOneEndlessField,
  // Complete literal fields of about 1 KiB, filling each frame: a header
  // list that never ends.
  kManyFields,
};

// The defaults are the flood the regression tests send: enough to add over
// 100 MiB to an unguarded coordinator in about 3 s, never more than 10 s.
struct FloodOptions {
  FloodShape shape = FloodShape::kOneEndlessField;
  int64_t max_bytes = int64_t{64} << 20;  // stop after this many header bytes ...
  absl::Duration max_time = absl::Seconds(10);  // ... or after this long
  int frame_size = 16384;                       // CONTINUATION payload
  // Whether to acknowledge the server's SETTINGS. A well-behaved client
  // does; an attacker need not, and then the server's advertised header
  // list limit never takes effect in gRPC's chttp2 transport.
  bool ack_settings = false;
  // How long to keep reading the server's frames once the flood stops.
  absl::Duration drain = absl::Seconds(2);
};

// Connects to host:port over TLS (ALPN "h2"), sends the client preface and
// SETTINGS, then a HEADERS frame without END_HEADERS beginning a request
// with `prefix`, then CONTINUATION frames, none with END_HEADERS, until
// `options.max_bytes` or `options.max_time`, or until the server stops the
// connection. An error means the connection could not be made at all.
absl::StatusOr<Http2Outcome> SendHeaderFlood(const std::string& host, int port,
                                             const std::vector<HeaderField>& prefix,
                                             const FloodOptions& options);

// Sends one complete unary call: `fields` as a header block cut into frames
// of at most `frame_size` bytes (HEADERS, then CONTINUATIONs, the last with
// END_HEADERS), then `message` as one gRPC-framed DATA frame with
// END_STREAM; reads until the call's trailers, a reset, GOAWAY or `timeout`.
absl::StatusOr<Http2Outcome> SendUnaryCall(const std::string& host, int port,
                                           const std::vector<HeaderField>& fields,
                                           const std::string& message, int frame_size,
                                           bool ack_settings, absl::Duration timeout);

}  // namespace testing
}  // namespace tessera

#endif  // TESSERA_TESTS_HTTP2_RAW_CLIENT_H_
