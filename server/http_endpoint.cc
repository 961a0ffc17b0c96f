// GET routes over cpp-httplib (see http_endpoint.h).
#include "server/http_endpoint.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace tessera {

struct HttpEndpoint::Server {
  httplib::Server http;
};

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& flag,
                                                                  const std::string& listen,
                                                                  std::vector<HttpRoute> routes) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": \"", listen, "\" is not host:port"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::unique_ptr<HttpEndpoint> out(new HttpEndpoint());
  out->server_ = std::make_unique<Server>();
  httplib::Server& http = out->server_->http;
  for (HttpRoute& route : routes) {
    http.Get(route.pattern, [handler = std::move(route.handler)](const httplib::Request& request,
                                                                 httplib::Response& response) {
      std::vector<std::string> captures;
      for (size_t i = 1; i < request.matches.size(); ++i) captures.push_back(request.matches[i]);
      HttpResponse r = handler(captures);
      response.status = r.status;
      response.set_header("Cache-Control", "no-store");
      response.set_header("X-Content-Type-Options", "nosniff");
      for (const auto& [name, value] : r.headers) response.set_header(name.c_str(), value);
      response.set_content(r.body, r.content_type.c_str());
    });
  }
  const int bound =
      port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot listen on ", listen));
  }
  out->address_ = absl::StrCat(listen.substr(0, colon), ":", bound);
  out->thread_ = std::thread([server = out->server_.get()] { server->http.listen_after_bind(); });
  return out;
}

HttpEndpoint::~HttpEndpoint() {
  if (server_ != nullptr) server_->http.stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace tessera
