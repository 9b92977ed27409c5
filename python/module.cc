// _atoll: the compiled half of the Python package `atoll` (python/atoll/).
//
// A thin binding over atoll's own C++: ExternalLearner (the door connector,
// the learner actor and LearnerCore behind a ReplicaExchange), Run, chaos
// runs, topology files and model files. No protocol is written again here,
// and no libtorch is linked.
//
// Values cross as float32 buffers (the buffer protocol), never as NumPy
// arrays: the module has no NumPy ABI, so it loads beside NumPy 1, NumPy 2 or
// none. What atoll hands out is a `Floats` (it owns its values; torch.frombuffer,
// numpy.frombuffer and memoryview read it without a copy); what it takes is
// any C-contiguous float32 buffer (a Floats, a numpy array, an array('f')).
// The Python layer (atoll/tensors.py) moves them to and from the user's tensors.
//
// Threads: no thread of atoll ever calls into Python. Calls that wait (joining
// a syncer, closing, waiting for a run) release the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "atoll/chaos.h"
#include "atoll/cluster_token.h"
#include "atoll/external_learner.h"
#include "atoll/fault_plan.h"
#include "atoll/log.h"
#include "atoll/model_file.h"
#include "atoll/run.h"
#include "atoll/topology_file.h"

namespace py = pybind11;

namespace {

// Exceptions the Python layer re-exports: atoll.Refused, atoll.Unavailable, atoll.RunOver.
PyObject* g_refused = nullptr;
PyObject* g_unavailable = nullptr;
PyObject* g_over = nullptr;

[[noreturn]] void raise(const atl::Status& s) {
  const std::string msg(s.message());
  switch (s.code()) {
    case atl::Status::Code::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, msg.c_str());
      break;
    case atl::Status::Code::kRefused:
      PyErr_SetString(g_refused, msg.c_str());
      break;
    case atl::Status::Code::kUnavailable:
      PyErr_SetString(g_unavailable, msg.c_str());
      break;
    case atl::Status::Code::kOver:
      PyErr_SetString(g_over, msg.c_str());
      break;
    case atl::Status::Code::kIOError:
      PyErr_SetString(PyExc_OSError, msg.c_str());
      break;
    default:  // invalid argument, out of range, corruption: the input is wrong
      PyErr_SetString(PyExc_ValueError, msg.c_str());
  }
  throw py::error_already_set();
}

template <class T>
T value_or_raise(atl::Result<T> r) {
  if (!r.ok()) raise(r.status());
  return std::move(*r);
}

// ---- values: float32 buffers

// float32 values that atoll owns, shown to Python as a 1-D writable buffer.
struct Floats {
  std::vector<float> values;
};
using FloatsPtr = std::shared_ptr<Floats>;

FloatsPtr floats(std::vector<float> v) { return std::make_shared<Floats>(Floats{std::move(v)}); }

// Any C-contiguous float32 buffer, checked; `what` names it in errors. The
// returned info holds the buffer (and its exporter's lock) while it lives.
py::buffer_info float32_buffer(const py::buffer& b, const char* what) {
  py::buffer_info info = b.request();
  const bool is_float32 = info.itemsize == 4 && (info.format == "f" || info.format == "=f" || info.format == "<f");
  if (!is_float32)
    throw py::type_error(std::string(what) + ": expected float32 values, got a buffer of format '" + info.format +
                         "' (" + std::to_string(info.itemsize) + " bytes each)");
  py::ssize_t expected = info.itemsize;  // C order: the last axis is densest
  for (py::ssize_t axis = info.ndim - 1; axis >= 0; --axis) {
    if (info.shape[axis] != 1 && info.strides[axis] != expected)
      throw py::value_error(std::string(what) + ": the values are not contiguous (copy them first)");
    expected *= info.shape[axis];
  }
  return info;
}

// A copy of any C-contiguous float32 buffer, as a flat vector.
std::vector<float> from_buffer(const py::buffer& b, const char* what) {
  const py::buffer_info info = float32_buffer(b, what);
  const auto* at = static_cast<const float*>(info.ptr);
  return std::vector<float>(at, at + info.size);
}

std::vector<atl::NamedShape> shapes_from(const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
  std::vector<atl::NamedShape> out;
  for (const auto& [name, dims] : tensors) out.push_back({name, dims});
  return out;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> shapes_to(const std::vector<atl::NamedShape>& shapes) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& s : shapes) out.emplace_back(s.name, s.dims);
  return out;
}

py::object json_object(const std::string& text) { return py::module_::import("json").attr("loads")(text); }

atl::Topology topology_from(const std::string& toml) { return value_or_raise(atl::parse_topology(toml, "topology")); }

// ---- what crosses at a step boundary (atoll/replica_exchange.h), with buffers for vectors

struct Update {
  uint32_t fragment = 0;
  float scale = 0.0f;  // the fragment becomes fragment * scale + offset
  FloatsPtr offset;
};

struct Moments {
  int64_t step = 0;
  FloatsPtr m, v;
};

struct Request {
  std::vector<Update> updates;
  std::optional<Moments> moments;
  std::vector<uint32_t> reads;
  bool read_moments = false;
  bool freeze = false;
  uint64_t sequence = 0;
};

// ---- the learner

class Learner {
 public:
  static std::unique_ptr<Learner> join(const std::string& syncer, std::optional<uint32_t> id, const std::string& token,
                                       const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
                                       double speed, uint32_t batch_size, const std::string& tls_cert,
                                       const std::string& tls_key, const std::string& tls_ca,
                                       const std::string& tls_name, double wait_seconds, double give_up_seconds,
                                       double timeout_seconds) {
    atl::ExternalLearner::Options o;
    o.join = syncer;
    o.id = id;
    o.cluster.token = token;
    o.cluster.tls_certificate = tls_cert;
    o.cluster.tls_key = tls_key;
    o.cluster.tls_ca = tls_ca;
    o.cluster.tls_name = tls_name;
    o.cluster.give_up_seconds = give_up_seconds;
    o.cluster.connection_timeout_seconds = timeout_seconds;
    o.tensors = shapes_from(tensors);
    o.speed = speed;
    o.batch_size = batch_size;
    o.wait_seconds = wait_seconds;
    atl::Result<std::unique_ptr<atl::ExternalLearner>> joined = atl::Status::unavailable("not joined");
    {
      py::gil_scoped_release nogil;
      joined = atl::ExternalLearner::join(std::move(o));
    }
    auto l = std::make_unique<Learner>();
    l->learner_ = value_or_raise(std::move(joined));
    return l;
  }

  ~Learner() {
    auto learner = std::move(learner_);  // under the GIL: no Python thread can reach it any more
    py::gil_scoped_release nogil;        // the run's threads are joined
    learner.reset();
  }

  atl::ExternalLearner& get() {
    if (!learner_) throw py::value_error("the learner is closed");
    return *learner_;
  }

  // Per fragment, its pieces: (tensor index, offset in the fragment's vector, values, offset in the
  // tensor). A piece is a whole tensor (offset 0) or, in a syncer in shards, a block of one's rows.
  std::vector<std::vector<std::tuple<int, size_t, size_t, size_t>>> fragments() {
    std::vector<std::vector<std::tuple<int, size_t, size_t, size_t>>> out;
    for (const auto& f : get().exchange().fragments()) {
      auto& pieces = out.emplace_back();
      for (const auto& p : f.pieces) pieces.emplace_back(p.tensor, p.fragment_offset, p.size, p.tensor_offset);
    }
    return out;
  }

  Request request() {
    atl::ReplicaRequest r = get().exchange().request();
    Request out;
    for (auto& u : r.updates) out.updates.push_back({u.fragment, u.scale, floats(std::move(u.offset))});
    if (r.moments)
      out.moments = Moments{r.moments->step, floats(std::move(r.moments->m)), floats(std::move(r.moments->v))};
    out.reads = std::move(r.reads);
    out.read_moments = r.read_moments;
    out.freeze = r.freeze;
    out.sequence = r.sequence;
    return out;
  }

  // Returns the step's number. The values are lent, not copied here (the actor's thread copies them): their
  // memory must stay unchanged until released(number).
  uint64_t hand(int64_t tokens, double loss, const std::vector<uint32_t>& reads, std::optional<py::buffer> values,
                std::optional<Moments> moments, std::optional<atl::Evaluation> evaluation, bool frozen,
                std::optional<uint64_t> read_at, std::optional<std::pair<int64_t, py::buffer>> lent_moments,
                bool moments_coming) {
    if (tokens < 0) throw py::value_error("tokens must be >= 0, got " + std::to_string(tokens));
    auto& ex = get().exchange();
    atl::ReplicaStep step;
    step.loss = loss;
    step.tokens = tokens;
    step.frozen = frozen;
    step.read_at = read_at;
    size_t total = 0;
    for (uint32_t f : reads) {
      if (f >= ex.fragments().size()) throw py::value_error("fragment " + std::to_string(f) + " does not exist");
      total += ex.fragments()[f].size;
    }
    if (!reads.empty()) {
      if (!values) throw py::value_error("the fragments read need their values");
      const py::buffer_info all = float32_buffer(*values, "values");
      if (static_cast<size_t>(all.size) != total)
        throw py::value_error("the fragments read need " + std::to_string(total) + " values, got " +
                              std::to_string(all.size));
      step.fragments = reads;
      step.lent = std::span<const float>(static_cast<const float*>(all.ptr), total);
    }
    if (moments) {
      if (!moments->m || !moments->v) throw py::value_error("moments: m and v are both needed");
      // Taken, not copied: two vectors the size of the model (atoll.Learner makes them for this hand alone).
      step.moments = atl::OptimizerMoments{moments->step, std::move(moments->m->values), std::move(moments->v->values)};
    }
    if (lent_moments) {  // (step, m then v): lent like the values, copied on the actor's thread
      if (moments) throw py::value_error("moments are given or lent, not both");
      const py::buffer_info mv = float32_buffer(lent_moments->second, "lent moments");
      if (static_cast<size_t>(mv.size) != 2 * ex.layout().size())
        throw py::value_error("lent moments need m and v back to back, " + std::to_string(2 * ex.layout().size()) +
                              " values, got " + std::to_string(mv.size));
      if (lent_moments->first < 0) throw py::value_error("lent moments: the step must be >= 0");
      step.moments_step = lent_moments->first;
      step.moments_lent = std::span<const float>(static_cast<const float*>(mv.ptr), static_cast<size_t>(mv.size));
    }
    step.moments_coming = moments_coming;
    step.evaluation = std::move(evaluation);
    return ex.hand(std::move(step));
  }

  bool released(uint64_t number, double seconds) {
    auto& ex = get().exchange();
    py::gil_scoped_release nogil;
    return ex.released(number, seconds);
  }

  void leave(const std::string& reason, double drain_seconds) {
    auto& learner = get();
    py::gil_scoped_release nogil;
    learner.leave(reason, drain_seconds);
  }

  bool wait_welcome(double seconds) {
    auto& ex = get().exchange();
    py::gil_scoped_release nogil;
    return ex.wait_welcome(seconds);
  }

  std::pair<FloatsPtr, std::vector<uint64_t>> global_parameters() {
    std::vector<uint64_t> versions;
    std::vector<float> values = get().exchange().global(&versions);
    return {floats(std::move(values)), std::move(versions)};
  }

  py::object close(double seconds) {
    if (!learner_) return py::none();
    auto learner = std::move(learner_);  // under the GIL: another Python thread now finds it closed
    atl::Result<atl::Report> report = atl::Status::unavailable("not closed");
    {
      py::gil_scoped_release nogil;
      report = learner->close(seconds);
      learner.reset();
    }
    if (!report.ok()) return py::none();  // the learner had failed: its state said why
    return json_object(report->to_json());
  }

 private:
  std::unique_ptr<atl::ExternalLearner> learner_;
};

// ---- a run in this process

class PyRun {
 public:
  PyRun(const std::string& topology_toml, const py::dict& o) {
    atl::RunOptions options;
    const auto get = [&](const char* key, auto fallback) {
      return o.contains(key) && !o[key].is_none() ? o[key].cast<decltype(fallback)>() : fallback;
    };
    options.data_root = get("data_root", std::string());
    options.seconds = get("seconds", 0.0);
    options.compute_threads = get("compute_threads", 0);
    options.run_name = get("run_name", std::string());
    options.curve_points = get("curve_points", 0);
    options.save_model = get("save_model", std::string());
    options.cluster.listen = get("listen", std::string());
    options.cluster.token = get("token", std::string());
    options.cluster.tls_certificate = get("tls_cert", std::string());
    options.cluster.tls_key = get("tls_key", std::string());
    options.cluster.tls_ca = get("tls_ca", std::string());
    options.cluster.tls_name = get("tls_name", std::string());
    const atl::Topology topology = topology_from(topology_toml);
    atl::Result<std::unique_ptr<atl::Run>> started = atl::Status::unavailable("not started");
    {
      py::gil_scoped_release nogil;
      started = atl::Run::start(topology, options);
    }
    run_ = value_or_raise(std::move(started));
  }

  ~PyRun() {
    auto run = std::move(run_);
    py::gil_scoped_release nogil;
    run.reset();
  }

  atl::Run& get() {
    if (!run_) throw py::value_error("the run is over: wait() returned its report");
    return *run_;
  }

  py::object wait() {
    auto& run = get();
    atl::Result<atl::Report> report = atl::Status::unavailable("not waited");
    {
      py::gil_scoped_release nogil;
      report = run.wait();
    }
    parameters_ = floats(run.parameters());
    view_ = atl::view_json(run.view());
    {
      auto over = std::move(run_);
      py::gil_scoped_release nogil;
      over.reset();
    }
    return json_object(value_or_raise(std::move(report)).to_json());
  }

  py::object view() { return json_object(run_ ? atl::view_json(run_->view()) : view_); }

  uint32_t add_learner(double speed, int batch_size) {
    auto& run = get();
    atl::Result<uint32_t> id = atl::Status::unavailable("not asked");
    {
      py::gil_scoped_release nogil;
      id = run.add_learner(atl::LearnerSpec{speed, batch_size});
    }
    return value_or_raise(std::move(id));
  }

  FloatsPtr parameters() { return run_ ? floats(run_->parameters()) : parameters_; }

 private:
  std::unique_ptr<atl::Run> run_;
  FloatsPtr parameters_ = floats({});  // kept from the run once it is over
  std::string view_;
};

}  // namespace

PYBIND11_MODULE(_atoll, m) {
  m.doc() = "The compiled half of the atoll package: use `import atoll`, whose docstrings explain it.";
  m.attr("__version__") = ATOLL_VERSION;
  g_refused = PyErr_NewExceptionWithDoc("atoll.Refused", "The syncer refused this learner (token, id, model).",
                                        PyExc_RuntimeError, nullptr);
  g_unavailable = PyErr_NewExceptionWithDoc("atoll.Unavailable",
                                            "No syncer answered, or it was lost for longer than give_up_seconds.",
                                            PyExc_ConnectionError, nullptr);
  g_over = PyErr_NewExceptionWithDoc("atoll.RunOver", "The run this learner would join is over.", PyExc_Exception,
                                     nullptr);
  m.attr("Refused") = py::handle(g_refused);
  m.attr("Unavailable") = py::handle(g_unavailable);
  m.attr("RunOver") = py::handle(g_over);

  py::class_<Floats, FloatsPtr>(m, "Floats", py::buffer_protocol())
      .def(py::init([](size_t n) { return floats(std::vector<float>(n)); }), py::arg("n"))
      .def("__len__", [](const Floats& f) { return f.values.size(); })
      .def_buffer([](Floats& f) {
        return py::buffer_info(f.values.data(), sizeof(float), py::format_descriptor<float>::format(), 1,
                               {static_cast<py::ssize_t>(f.values.size())}, {static_cast<py::ssize_t>(sizeof(float))});
      });

  py::class_<Update>(m, "Update")
      .def_readonly("fragment", &Update::fragment)
      .def_readonly("scale", &Update::scale)
      .def_readonly("offset", &Update::offset);
  py::class_<Moments>(m, "Moments")
      .def(py::init([](int64_t step, const py::buffer& mb, const py::buffer& vb) {
             return Moments{step, floats(from_buffer(mb, "moments m")), floats(from_buffer(vb, "moments v"))};
           }),
           py::arg("step"), py::arg("m"), py::arg("v"))
      .def_readonly("step", &Moments::step)
      .def_readonly("m", &Moments::m)
      .def_readonly("v", &Moments::v);
  py::class_<Request>(m, "Request")
      .def_readonly("updates", &Request::updates)
      .def_readonly("moments", &Request::moments)
      .def_readonly("reads", &Request::reads)
      .def_readonly("read_moments", &Request::read_moments)
      .def_readonly("freeze", &Request::freeze)
      .def_readonly("sequence", &Request::sequence);
  py::class_<atl::ReplicaState>(m, "State")
      .def_readonly("welcomed", &atl::ReplicaState::welcomed)
      .def_readonly("over", &atl::ReplicaState::over)
      .def_readonly("why", &atl::ReplicaState::why)
      .def_readonly("failed", &atl::ReplicaState::failed)
      .def_readonly("refused", &atl::ReplicaState::refused)
      .def_readonly("stopping", &atl::ReplicaState::stopping)
      .def_readonly("incarnation", &atl::ReplicaState::incarnation)
      .def_readonly("versions", &atl::ReplicaState::versions)
      .def_readonly("steps", &atl::ReplicaState::steps)
      .def_readonly("tokens", &atl::ReplicaState::tokens)
      .def_readonly("final_evaluation_wanted", &atl::ReplicaState::final_evaluation_wanted);
  py::class_<atl::Evaluation>(m, "Evaluation")
      .def(py::init([](double loss, double bits_per_byte, double accuracy, uint64_t count,
                       std::vector<uint64_t> versions) {
             atl::Evaluation e;
             e.loss = loss;
             e.bits_per_byte = bits_per_byte;
             e.accuracy = accuracy;
             e.count = count;
             e.versions = std::move(versions);
             return e;
           }),
           py::arg("loss"), py::arg("bits_per_byte"), py::arg("accuracy"), py::arg("count"), py::arg("versions"))
      .def_readonly("loss", &atl::Evaluation::loss)
      .def_readonly("bits_per_byte", &atl::Evaluation::bits_per_byte)
      .def_readonly("accuracy", &atl::Evaluation::accuracy)
      .def_readonly("count", &atl::Evaluation::count)
      .def_readonly("versions", &atl::Evaluation::versions);

  py::class_<Learner>(m, "Learner")
      .def_static("join", &Learner::join, py::arg("syncer"), py::arg("id"), py::arg("token"), py::arg("tensors"),
                  py::arg("speed"), py::arg("batch_size"), py::arg("tls_cert"), py::arg("tls_key"),
                  py::arg("tls_ca"), py::arg("tls_name"), py::arg("wait_seconds"), py::arg("give_up_seconds"),
                  py::arg("timeout_seconds"))
      .def("topology", [](Learner& l) { return atl::to_toml(l.get().topology()); })
      .def("id", [](Learner& l) { return l.get().id(); })
      .def("leave", &Learner::leave, py::arg("reason"), py::arg("drain_seconds"))
      .def("layout", [](Learner& l) { return shapes_to(atl::shapes_of(l.get().exchange().layout())); })
      .def("fragments", &Learner::fragments)
      .def("request", &Learner::request)
      .def("hand", &Learner::hand, py::arg("tokens"), py::arg("loss"), py::arg("reads"), py::arg("values"),
           py::arg("moments"), py::arg("evaluation"), py::arg("frozen"), py::arg("read_at") = py::none(),
           py::arg("lent_moments") = py::none(), py::arg("moments_coming") = false)
      .def("released", &Learner::released, py::arg("number"), py::arg("seconds") = 0.0)
      .def("state", [](Learner& l) { return l.get().state(); })
      .def("wait_welcome", &Learner::wait_welcome, py::arg("seconds"))
      .def("global_parameters", &Learner::global_parameters)
      .def("close", &Learner::close, py::arg("seconds"));

  py::class_<PyRun>(m, "Run")
      .def(py::init<const std::string&, const py::dict&>(), py::arg("topology"), py::arg("options"))
      .def("view", &PyRun::view)
      .def("stop", [](PyRun& r) { r.get().stop(); })
      .def("finished", [](PyRun& r) { return r.get().finished(); })
      .def("port", [](PyRun& r) { return r.get().port(); })
      .def("kill_learner", [](PyRun& r, uint32_t id) { return r.get().kill_learner(id); }, py::arg("id"))
      .def("add_learner", &PyRun::add_learner, py::arg("speed"), py::arg("batch_size"))
      .def("leave_learner",
           [](PyRun& r, uint32_t id, const std::string& reason, double drain) {
             return r.get().leave_learner(id, reason, drain);
           },
           py::arg("id"), py::arg("reason"), py::arg("drain_seconds"))
      .def("stall_learner", [](PyRun& r, uint32_t id, double s) { return r.get().stall_learner(id, s); },
           py::arg("id"), py::arg("seconds"))
      .def("wait", &PyRun::wait)
      .def("parameters", &PyRun::parameters);

  m.def("default_topology", [] { return atl::to_toml(atl::Topology{}); });
  m.def(
      "load_topology",
      [](const std::string& path, const std::vector<std::string>& overrides) {
        return atl::to_toml(value_or_raise(atl::load_topology(path, overrides)));
      },
      py::arg("path"), py::arg("overrides"));
  m.def(
      "parse_topology",
      [](const std::string& text, const std::string& source, const std::vector<std::string>& overrides) {
        return atl::to_toml(value_or_raise(atl::parse_topology(text, source, overrides)));
      },
      py::arg("text"), py::arg("source"), py::arg("overrides"));
  m.def(
      "topology_json", [](const std::string& toml) { return atl::to_json(topology_from(toml)); },
      py::arg("topology"));

  m.def(
      "run_chaos",
      [](const std::string& plan_path, std::optional<std::string> topology, const std::string& data_root,
         const std::string& tape_dir) {
        atl::FaultPlan plan = value_or_raise(atl::load_fault_plan(plan_path));
        if (topology) plan.topology = topology_from(*topology);
        atl::ChaosOptions options;
        options.run.data_root = data_root;
        options.tape_dir = tape_dir;
        atl::Result<std::vector<atl::ChaosResult>> results = atl::Status::unavailable("not run");
        {
          py::gil_scoped_release nogil;
          results = atl::run_plan(plan, options);
        }
        const auto all = value_or_raise(std::move(results));
        return py::make_tuple(json_object(atl::chaos_json(all)), atl::chaos_table(all));
      },
      py::arg("plan"), py::arg("topology"), py::arg("data_root"), py::arg("tape_dir"));

  m.def(
      "save_model",
      [](const std::string& path, const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
         const py::buffer& values, const std::string& description) {
        atl::ModelFile f{shapes_from(tensors), from_buffer(values, "values"), description};
        if (atl::Status s = atl::save_model_file(path, f); !s.ok()) raise(s);
      },
      py::arg("path"), py::arg("tensors"), py::arg("values"), py::arg("description"));
  m.def(
      "load_model",
      [](const std::string& path) {
        atl::ModelFile f = value_or_raise(atl::load_model_file(path));
        return py::make_tuple(shapes_to(f.tensors), floats(std::move(f.values)), f.description);
      },
      py::arg("path"));
  m.def(
      "load_token", [](const std::string& file) { return value_or_raise(atl::load_cluster_token(file)); },
      py::arg("file"));
  m.def("make_token", &atl::make_cluster_token);
  m.def(
      "set_log_level",
      [](const std::string& level) {
        static const std::pair<const char*, atl::LogLevel> kLevels[] = {
            {"debug", atl::LogLevel::kDebug}, {"info", atl::LogLevel::kInfo},
            {"warn", atl::LogLevel::kWarn}, {"error", atl::LogLevel::kError}};
        for (const auto& [name, l] : kLevels)
          if (level == name) return atl::set_log_level(l);
        throw py::value_error("log level '" + level + "': expected debug, info, warn or error");
      },
      py::arg("level"));
}
