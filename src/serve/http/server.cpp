#include "lithe/serve/server.h"

#include <dirent.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <csignal>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

#include "lithe/core/log.h"
#include "lithe/serve/api.h"

namespace lithe::serve {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

int g_signal_pipe[2] = {-1, -1};
extern "C" void on_stop_signal(int) {
  const char c = 1;
  [[maybe_unused]] ssize_t r = write(g_signal_pipe[1], &c, 1);
}

// Not "application/json" exactly: httplib then leaves the body uncompressed, so the whitespace
// heartbeats of a waiting non-streamed response reach the socket (and reveal a gone client).
constexpr const char* kJson = "application/json; charset=utf-8";

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(e.to_json()), kJson);
}

// The listening socket on `port` (httplib 0.11 does not expose it), or -1.
int find_listening_socket(int port) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    int listening = 0;
    socklen_t len = sizeof listening;
    if (fd <= 2 || getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    const int p = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                             : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (p == port) found = fd;
  }
  closedir(d);
  return found;
}

std::string endpoint_label(const std::string& path) {
  for (const char* p : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics", "/"})
    if (path == p) return p;
  if (path.starts_with("/v1/models/")) return "/v1/models";
  return "other";
}

class Server {
 public:
  Server(Model& model, const ServerOptions& opts, std::shared_ptr<KvPool> pool)
      : model_(model), opts_(opts), engine_(model, opts.engine, metrics_, std::move(pool)) {
    format_.tokenizer = &model.tokenizer();
    const Tokenizer& tok = model.tokenizer();
    if (!model.chat_template().empty()) {
      auto t = ChatTemplate::parse(model.chat_template());
      if (t) format_.chat_template.emplace(std::move(*t));
      else log::warn("serve: the model's chat template does not parse ({}): chat requests are refused",
                     t.status().to_string());
    }
    format_.render.add_generation_prompt = true;
    if (tok.bos_id() >= 0) format_.render.bos_token = tok.token_text(tok.bos_id());
    if (tok.eos_id() >= 0) format_.render.eos_token = tok.token_text(tok.eos_id());
    routes();
  }

  Status run();

 private:
  void routes();
  void generate(Endpoint ep, const httplib::Request& req, httplib::Response& res);

  Model& model_;
  const ServerOptions& opts_;
  Metrics metrics_;
  Engine engine_;
  PromptFormat format_;
  httplib::Server http_;
  std::atomic<bool> draining_{false};
};

void Server::routes() {
  const size_t threads = static_cast<size_t>(std::max(4, opts_.http_threads));
  http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_.set_payload_max_length(opts_.max_body_bytes);
  http_.set_keep_alive_max_count(1000);
  http_.set_read_timeout(30, 0);
  http_.set_write_timeout(30, 0);

  http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (opts_.api_key.empty() || !req.path.starts_with("/v1/")) return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    if (auth == "Bearer " + opts_.api_key) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, {401,
                     auth.empty() ? "no API key: send the header 'Authorization: Bearer KEY'"
                                  : "the API key is wrong: send the key the server was started with (--api-key)",
                     "invalid_request_error", "", "invalid_api_key"});
    return httplib::Server::HandlerResponse::Handled;
  });
  http_.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours, already JSON
    ApiError e{res.status, "", "invalid_request_error", "", ""};
    if (res.status == 404) {
      e.message = fmt::format("no route {} {}: this server has POST /v1/completions, POST /v1/chat/completions, GET "
                              "/v1/models, /health, /metrics and /",
                              req.method, req.path);
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message = fmt::format("the request body is over the server's limit of {} bytes: send less", opts_.max_body_bytes);
      e.code = "request_too_large";
    } else if (res.status == 400) {
      e.message = "malformed HTTP request";
    } else {
      e.message = fmt::format("HTTP {}", res.status);
      if (res.status >= 500) e.type = "server_error";
    }
    send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    log::error("serve: handler failed: {}", what);
    send_error(res, {500, "internal error: " + what, "server_error", "", ""});
  });
  http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.count_request(endpoint_label(req.path), res.status);
    log::debug("serve: {} {} -> {}", req.method, req.path, res.status);
  });

  http_.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kChatPage, "text/html; charset=utf-8");
  });
  http_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", kJson);
  });
  http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(), "text/plain; version=0.0.4");
  });
  auto model_json = [this] {
    return json{{"id", opts_.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "lithe"},
                {"context_length", opts_.engine.ctx}};
  };
  http_.Get("/v1/models", [model_json](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump({{"object", "list"}, {"data", json::array({model_json()})}}), kJson);
  });
  http_.Get(R"(/v1/models/(.+))", [this, model_json](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] == opts_.model_id) return res.set_content(dump(model_json()), kJson);
    send_error(res, {404, fmt::format("the model '{}' does not exist: this server serves '{}'", req.matches[1].str(),
                                      opts_.model_id),
                     "invalid_request_error", "model", "model_not_found"});
  });
  http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::completions, req, res);
  });
  http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::chat, req, res);
  });
}

void Server::generate(Endpoint ep, const httplib::Request& req, httplib::Response& res) {
  if (draining_) {  // a request on a kept-alive connection after SIGTERM
    res.set_header("Connection", "close");
    return send_error(res, {503, "the server is shutting down: retry on another instance", "server_error", "",
                            "shutting_down"});
  }
  auto parsed = parse_request(ep, req.body, opts_.model_id);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  auto r = std::make_shared<ApiRequest>(std::move(std::get<ApiRequest>(parsed)));
  if (auto e = prepare(*r, format_, opts_.engine.ctx, opts_.engine.cache.rolling())) return send_error(res, *e);
  if (Status st = engine_.check(r->gen); !st.is_ok())
    return send_error(res, {400, st.message(), "invalid_request_error", "max_tokens", "invalid_value"});
  auto submitted = engine_.submit(r->gen);
  if (!submitted) return send_error(res, {503, submitted.status().message(), "server_error", "", "overloaded"});
  std::shared_ptr<RequestHandle> handle = *submitted;
  auto c = std::make_shared<Completion>();
  c->id = new_completion_id(ep);
  c->model = opts_.model_id;
  c->created = static_cast<int64_t>(std::time(nullptr));
  auto cancel_if_failed = [handle](bool success) {
    if (!success) handle->cancel();
  };
  res.set_header("Cache-Control", "no-cache");
  if (r->stream) {
    auto first = std::make_shared<bool>(true);
    res.set_chunked_content_provider(
        "text/event-stream",
        [r, c, handle, first](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) {
            if (sink.write(s.data(), s.size())) return true;
            handle->cancel();  // the client is gone
            return false;
          };
          Event ev;
          if (!handle->next(ev, 1000ms)) return write(": waiting\n\n");  // an SSE comment: reveals a gone client
          Completion piece = *c;
          piece.text = std::move(ev.text);
          piece.logprobs = std::move(ev.logprobs);
          if (ev.done && ev.finish_reason == "error") {
            write("data: " + dump(ApiError{500, ev.error, "server_error", "", ""}.to_json()) + "\n\n");
            sink.done();
            return true;
          }
          if (ev.done) piece.finish_reason = ev.finish_reason == "cancelled" ? "stop" : ev.finish_reason;
          if (piece.text.empty() && piece.logprobs.empty() && !ev.done && !*first) return true;
          if (!write("data: " + dump(chunk_json(*r, piece, *first)) + "\n\n")) return false;
          *first = false;
          if (!ev.done) return true;
          piece.prompt_tokens = ev.prompt_tokens;
          piece.completion_tokens = ev.completion_tokens;
          if (r->include_usage && !write("data: " + dump(usage_chunk_json(*r, piece)) + "\n\n")) return false;
          if (!write("data: [DONE]\n\n")) return false;
          sink.done();
          return true;
        },
        cancel_if_failed);
    return;
  }
  res.set_chunked_content_provider(
      kJson,
      [r, c, handle](size_t, httplib::DataSink& sink) {
        Event ev;
        if (!handle->next(ev, 1000ms)) {  // JSON may start with whitespace: a heartbeat that reveals a gone client
          if (sink.write(" ", 1)) return true;
          handle->cancel();
          return false;
        }
        c->text += ev.text;
        for (auto& lp : ev.logprobs) c->logprobs.push_back(std::move(lp));
        if (!ev.done) return true;
        std::string body;
        if (ev.finish_reason == "error") {
          body = dump(ApiError{500, ev.error, "server_error", "", ""}.to_json());
        } else {
          c->finish_reason = ev.finish_reason;
          c->prompt_tokens = ev.prompt_tokens;
          c->completion_tokens = ev.completion_tokens;
          body = dump(response_json(*r, *c));
        }
        sink.write(body.data(), body.size());
        sink.done();
        return true;
      },
      cancel_if_failed);
}

Status Server::run() {
  int port = opts_.port;
  if (port == 0) {
    port = http_.bind_to_any_port(opts_.host);
    if (port < 0) return error(StatusCode::io_error, "cannot listen on {} (any port)", opts_.host);
  } else if (!http_.bind_to_port(opts_.host, port)) {
    return error(StatusCode::io_error, "cannot listen on {}:{}: is the port in use? pick another with --port",
                 opts_.host, port);
  }
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0)
    return error(StatusCode::io_error, "pipe2 failed: {}", std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  std::atomic<bool> listening_done{false};
  std::thread watcher([&] {
    char c = 0;
    while (read(g_signal_pipe[0], &c, 1) < 0 && errno == EINTR) {
    }
    if (c != 1) return;
    log::info("serve: stopping: no new connections; finishing the requests in flight");
    draining_ = true;
    // Shutting the listening socket down ends httplib's accept loop, which then waits for the
    // connections it is serving. (Server::stop() would also cut off streams in progress.)
    const int fd = find_listening_socket(port);
    if (fd >= 0) {
      shutdown(fd, SHUT_RDWR);
      return;
    }
    log::warn("serve: listening socket not found: stopping at once");
    while (!listening_done) {
      http_.stop();
      std::this_thread::sleep_for(50ms);
    }
  });
  std::printf("lithe serve: listening on http://%s:%d (model %s)\n", opts_.host.c_str(), port, opts_.model_id.c_str());
  std::fflush(stdout);
  const bool ok = http_.listen_after_bind();
  listening_done = true;
  const char zero = 0;
  [[maybe_unused]] ssize_t w = write(g_signal_pipe[1], &zero, 1);
  watcher.join();
  engine_.stop();
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);
  if (!ok && !draining_) return error(StatusCode::io_error, "the server on {}:{} stopped with an error", opts_.host, port);
  log::info("serve: stopped");
  return Status::ok();
}

}  // namespace

Status serve(Model& model, const ServerOptions& options) {
  if (!model.has_tokenizer()) return error(StatusCode::invalid_argument, "the model has no tokenizer: serve needs one");
  LITHE_ASSIGN(auto pool, Engine::make_pool(model, options.engine));
  log::info("serve: KV pool of {} blocks x {} tokens ({:.1f} MiB, {})", pool->num_blocks(), pool->block_size(),
            static_cast<double>(pool->bytes()) / (1 << 20), dtype_name(pool->dtype()));
  Server server(model, options, std::move(pool));
  return server.run();
}

}  // namespace lithe::serve
