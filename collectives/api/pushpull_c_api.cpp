// The push-pull C API (include/antdt/pushpull.h) over antdt::PushPull.
#include <antdt/pushpull.h>
#include <antdt/pushpull.hpp>

#include "collectives/api/c_api.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

#include <memory>
#include <vector>

struct antdtPushPull {
  antdt::PushPull pp;
};

namespace {

antdt::PushPull& unwrap(antdtPushPull_t pp) {
  ANTDT_CHECK_ARG(pp != nullptr, "push-pull handle is null");
  return pp->pp;
}

antdt::DataType to_dtype(antdtDataType_t t) {
  auto d = static_cast<antdt::DataType>(t);
  antdt::check_dtype(d);
  return d;
}

antdt::ReduceOp to_op(antdtReduceOp_t o) {
  auto op = static_cast<antdt::ReduceOp>(o);
  antdt::check_op(op);
  return op;
}

}  // namespace

extern "C" {

antdtStatus_t antdtPushPullCreate(antdtPushPull_t* pp, antdtComm_t comm, const antdtPushPullKey* keys, size_t nkeys,
                                  const antdtPushPullOptions* opts) {
  return antdt::api::c_api_guarded([&] {
    ANTDT_CHECK_ARG(pp != nullptr, "output push-pull pointer is null");
    *pp = nullptr;
    ANTDT_CHECK_ARG(nkeys == 0 || keys != nullptr, "key table is null with ", nkeys, " keys");
    antdt::PushPullOptions o;
    if (opts != nullptr) {
      ANTDT_CHECK_ARG(opts->struct_size >= sizeof(antdtPushPullOptions), "antdtPushPullOptions.struct_size is ",
                      opts->struct_size, ", expected at least ", sizeof(antdtPushPullOptions),
                      " (set it to sizeof(antdtPushPullOptions))");
      ANTDT_CHECK_ARG(opts->nservers >= 0 && (opts->nservers == 0 || opts->servers != nullptr),
                      "antdtPushPullOptions: servers is null or nservers negative (", opts->nservers, ")");
      o.servers.assign(opts->servers, opts->servers + opts->nservers);
      o.partition_bytes = opts->partition_bytes;
    }
    std::vector<antdt::PushPullKey> table;
    table.reserve(nkeys);
    for (size_t i = 0; i < nkeys; ++i) table.push_back({keys[i].key, keys[i].count, to_dtype(keys[i].dtype)});
    auto handle = std::make_unique<antdtPushPull>(
        antdtPushPull{antdt::PushPull(antdt::api::c_api_comm(comm), table, o)});
    *pp = handle.release();  // owned by the caller until antdtPushPullDestroy
  });
}

antdtStatus_t antdtPushPullDestroy(antdtPushPull_t pp) {
  return antdt::api::c_api_guarded([&] { std::unique_ptr<antdtPushPull> owned(pp); });
}

antdtStatus_t antdtPush(antdtPushPull_t pp, uint64_t key, const void* data, double weight) {
  return antdtPushStream(pp, key, data, weight, nullptr);
}

antdtStatus_t antdtPushStream(antdtPushPull_t pp, uint64_t key, const void* data, double weight, void* stream) {
  return antdt::api::c_api_guarded([&] { unwrap(pp).push(key, data, weight, stream); });
}

antdtStatus_t antdtPull(antdtPushPull_t pp, uint64_t key, void* out, antdtReduceOp_t op) {
  return antdtPullStream(pp, key, out, op, nullptr);
}

antdtStatus_t antdtPullStream(antdtPushPull_t pp, uint64_t key, void* out, antdtReduceOp_t op, void* stream) {
  return antdt::api::c_api_guarded([&] { unwrap(pp).pull(key, out, to_op(op), stream); });
}

antdtStatus_t antdtPartialPush(antdtPushPull_t pp, uint64_t key, const void* data, void* result, antdtReduceOp_t op,
                               const antdtPartialOptions* opts, antdtPartialResult* result_info) {
  return antdtPartialPushStream(pp, key, data, result, op, opts, result_info, nullptr);
}

antdtStatus_t antdtPartialPushStream(antdtPushPull_t pp, uint64_t key, const void* data, void* result,
                                     antdtReduceOp_t op, const antdtPartialOptions* opts,
                                     antdtPartialResult* result_info, void* stream) {
  return antdt::api::c_api_guarded([&] {
    ANTDT_CHECK_ARG(opts != nullptr, "partial options pointer is null");
    ANTDT_CHECK_ARG(opts->struct_size >= sizeof(antdtPartialOptions), "antdtPartialOptions.struct_size is ",
                    opts->struct_size, ", expected at least ", sizeof(antdtPartialOptions));
    antdt::api::c_api_check_partial_result(result_info);
    antdt::PartialOptions o{static_cast<antdt::LatePolicy>(opts->policy), opts->weight, opts->staleness,
                            opts->samples};
    antdt::api::c_api_partial_result(unwrap(pp).partial_push(key, data, result, to_op(op), o, stream), result_info);
  });
}

}  // extern "C"
