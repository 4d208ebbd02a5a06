// ProcessGroupAntdt's collectives. Each checks its arguments on the caller's
// thread (a RuntimeError at the call) and queues the antdt call on the worker.
// Reductions hand antdt the element type; everything that only moves data
// moves bytes, so it works for every dtype.
#include "process_group.hpp"

#include "staged_tensor.hpp"
#include "tensor_types.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <memory>
#include <vector>

namespace antdt::pytorch {
namespace {

void check_tensor(const at::Tensor& t, const char* operation) {
  TORCH_CHECK(t.defined(), "antdt: ", operation, " got an undefined tensor");
  TORCH_CHECK(!t.is_sparse(), "antdt: ", operation, " does not support sparse tensors");
  TORCH_CHECK(t.is_cpu(), "antdt: ", operation, " supports CPU tensors only in this build (got a tensor on ",
              t.device(), ")");
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* operation) {
  TORCH_CHECK(tensors.size() == 1, "antdt: ", operation, " takes one tensor per rank, got ", tensors.size());
  check_tensor(tensors[0], operation);
  return tensors[0];
}

void check_same_type(const at::Tensor& a, const at::Tensor& b, const char* operation) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "antdt: ", operation, " needs tensors of one dtype, got ",
              a.scalar_type(), " and ", b.scalar_type());
}

void check_root(int64_t root, int size, const char* operation) {
  TORCH_CHECK(root >= 0 && root < size, "antdt: ", operation, " root rank ", root,
              " is not in this process group of ", size, " ranks");
}

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> all;
  for (const auto& list : lists) all.insert(all.end(), list.begin(), list.end());
  return all;
}

std::byte* bytes_of(const StagedTensor& t) { return static_cast<std::byte*>(t.data()); }

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  const at::Tensor tensor = single(tensors, "all_reduce");
  const DataType dtype = reduction_dtype(tensor, "all_reduce");
  const ReduceOp op = reduction_op(opts.reduceOp, "all_reduce");
  return enqueue(c10d::OpType::ALLREDUCE, "all_reduce", {tensor}, [this, tensor, dtype, op] {
    StagedTensor buf(tensor, StagedTensor::Use::read_write);
    collectives_.allreduce(buf.data(), buf.data(), buf.numel(), dtype, op);
    buf.write_back();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  std::vector<DataType> dtypes;
  for (const auto& t : tensors) {
    check_tensor(t, "all_reduce_coalesced");
    dtypes.push_back(reduction_dtype(t, "all_reduce_coalesced"));
  }
  const ReduceOp op = reduction_op(opts.reduceOp, "all_reduce_coalesced");
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced", tensors, [this, tensors, dtypes, op] {
    std::vector<StagedTensor> bufs;
    bufs.reserve(tensors.size());
    for (const auto& t : tensors) bufs.emplace_back(t, StagedTensor::Use::read_write);
    // One group: antdt fuses the allreduces of one dtype into one pass.
    collectives_.group_start();
    try {
      for (std::size_t i = 0; i < bufs.size(); ++i)
        collectives_.allreduce(bufs[i].data(), bufs[i].data(), bufs[i].numel(), dtypes[i], op);
    } catch (...) {
      collectives_.group_end();
      throw;
    }
    collectives_.group_end();
    for (auto& b : bufs) b.write_back();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  const at::Tensor tensor = single(tensors, "broadcast");
  check_root(opts.rootRank, size_, "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::BROADCAST, "broadcast", {tensor}, [this, tensor, root] {
    StagedTensor buf(tensor, StagedTensor::Use::read_write);
    collectives_.broadcast(buf.data(), buf.data(), buf.nbytes(), kBytes, root);
    buf.write_back();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  const at::Tensor tensor = single(tensors, "reduce");
  const DataType dtype = reduction_dtype(tensor, "reduce");
  const ReduceOp op = reduction_op(opts.reduceOp, "reduce");
  check_root(opts.rootRank, size_, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::REDUCE, "reduce", {tensor}, [this, tensor, dtype, op, root] {
    StagedTensor buf(tensor, StagedTensor::Use::read_write);
    collectives_.reduce(buf.data(), buf.data(), buf.numel(), dtype, op, root);
    if (rank_ == root) buf.write_back();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions&) {
  check_tensor(output, "all_gather_into_tensor");
  check_tensor(input, "all_gather_into_tensor");
  check_same_type(output, input, "all_gather_into_tensor");
  TORCH_CHECK(output.numel() == input.numel() * size_, "antdt: all_gather_into_tensor needs an output of ", size_,
              " x ", input.numel(), " elements, got ", output.numel());
  return enqueue(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {output}, [this, output, input] {
    StagedTensor in(input, StagedTensor::Use::read);
    StagedTensor out(output, StagedTensor::Use::write);
    collectives_.allgather(in.data(), out.data(), in.nbytes(), kBytes);
    out.write_back();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions&) {
  const at::Tensor input = single(inputs, "all_gather");
  TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<std::size_t>(size_),
              "antdt: all_gather needs one output list of ", size_, " tensors");
  const std::vector<at::Tensor> list = outputs[0];
  for (const auto& t : list) {
    check_tensor(t, "all_gather");
    check_same_type(t, input, "all_gather");
  }
  TORCH_CHECK(list[rank_].numel() == input.numel(), "antdt: all_gather: output ", rank_, " has ",
              list[rank_].numel(), " elements but this rank's input has ", input.numel());
  return enqueue(c10d::OpType::ALLGATHER, "all_gather", list, [this, list, input] {
    // One contiguous buffer for every rank's block; blocks may differ in size
    // (allgatherv): each rank's output list says how long each block is.
    std::vector<std::size_t> counts;
    std::size_t total = 0;
    for (const auto& t : list) {
      counts.push_back(t.nbytes());
      total += t.nbytes();
    }
    StagedTensor in(input, StagedTensor::Use::read);
    at::Tensor flat = at::empty({static_cast<int64_t>(total)}, input.options().dtype(at::kByte));
    collectives_.allgatherv(in.data(), flat.data_ptr(), counts, {}, kBytes);
    std::size_t offset = 0;
    for (const auto& t : list) {
      const auto n = static_cast<int64_t>(t.nbytes());
      t.copy_(flat.narrow(0, static_cast<int64_t>(offset), n).view(t.scalar_type()).view(t.sizes()));
      offset += t.nbytes();
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                      std::vector<at::Tensor>& inputs,
                                                                      const c10d::AllgatherOptions&) {
  TORCH_CHECK(outputs.size() == static_cast<std::size_t>(size_), "antdt: all_gather_coalesced needs ", size_,
              " output lists, got ", outputs.size());
  for (const auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "antdt: all_gather_coalesced needs output lists of ", inputs.size(),
                " tensors (one per input)");
    for (std::size_t i = 0; i < list.size(); ++i) {
      check_tensor(list[i], "all_gather_coalesced");
      check_same_type(list[i], inputs[i], "all_gather_coalesced");
    }
  }
  for (std::size_t i = 0; i < inputs.size(); ++i)
    TORCH_CHECK(outputs[rank_][i].numel() == inputs[i].numel(), "antdt: all_gather_coalesced: output ", i,
                " of rank ", rank_, " differs in size from input ", i);
  const auto lists = outputs;
  return enqueue(c10d::OpType::ALLGATHER_COALESCED, "all_gather_coalesced", flatten(outputs), [this, lists, inputs] {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      StagedTensor in(inputs[i], StagedTensor::Use::read);
      at::Tensor flat = at::empty({static_cast<int64_t>(in.nbytes()) * size_}, inputs[i].options().dtype(at::kByte));
      collectives_.allgather(in.data(), flat.data_ptr(), in.nbytes(), kBytes);
      for (int r = 0; r < size_; ++r) {
        const at::Tensor& t = lists[r][i];
        t.copy_(flat.narrow(0, static_cast<int64_t>(in.nbytes()) * r, static_cast<int64_t>(in.nbytes()))
                    .view(t.scalar_type())
                    .view(t.sizes()));
      }
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::GatherOptions& opts) {
  const at::Tensor input = single(inputs, "gather");
  check_root(opts.rootRank, size_, "gather");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> list;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<std::size_t>(size_),
                "antdt: gather needs one output list of ", size_, " tensors at the root");
    list = outputs[0];
    for (const auto& t : list) {
      check_tensor(t, "gather");
      check_same_type(t, input, "gather");
    }
    TORCH_CHECK(list[root].numel() == input.numel(), "antdt: gather: the root's output ", root,
                " differs in size from its input");
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "antdt: gather takes an output list only at the root (rank ", root, ")");
  }
  return enqueue(c10d::OpType::GATHER, "gather", list, [this, list, input, root] {
    StagedTensor in(input, StagedTensor::Use::read);
    if (rank_ != root) {
      collectives_.send(in.data(), in.nbytes(), kBytes, root);
      return;
    }
    std::vector<StagedTensor> out;
    out.reserve(list.size());
    for (const auto& t : list) out.emplace_back(t, StagedTensor::Use::write);
    collectives_.group_start();
    for (int r = 0; r < size_; ++r)
      if (r != root) collectives_.recv(out[r].data(), out[r].nbytes(), kBytes, r);
    collectives_.group_end();
    std::memcpy(out[root].data(), in.data(), in.nbytes());
    for (auto& o : out) o.write_back();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  const at::Tensor output = single(outputs, "scatter");
  check_root(opts.rootRank, size_, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> list;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<std::size_t>(size_),
                "antdt: scatter needs one input list of ", size_, " tensors at the root");
    list = inputs[0];
    for (const auto& t : list) {
      check_tensor(t, "scatter");
      check_same_type(t, output, "scatter");
    }
    TORCH_CHECK(list[root].numel() == output.numel(), "antdt: scatter: the root's input ", root,
                " differs in size from its output");
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "antdt: scatter takes an input list only at the root (rank ", root, ")");
  }
  return enqueue(c10d::OpType::SCATTER, "scatter", {output}, [this, list, output, root] {
    StagedTensor out(output, StagedTensor::Use::write);
    if (rank_ != root) {
      collectives_.recv(out.data(), out.nbytes(), kBytes, root);
      out.write_back();
      return;
    }
    std::vector<StagedTensor> in;
    in.reserve(list.size());
    for (const auto& t : list) in.emplace_back(t, StagedTensor::Use::read);
    collectives_.group_start();
    for (int r = 0; r < size_; ++r)
      if (r != root) collectives_.send(in[r].data(), in[r].nbytes(), kBytes, r);
    collectives_.group_end();
    std::memcpy(out.data(), in[root].data(), out.nbytes());
    out.write_back();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  check_tensor(output, "reduce_scatter_tensor");
  check_tensor(input, "reduce_scatter_tensor");
  check_same_type(output, input, "reduce_scatter_tensor");
  TORCH_CHECK(input.numel() == output.numel() * size_, "antdt: reduce_scatter_tensor needs an input of ", size_,
              " x ", output.numel(), " elements, got ", input.numel());
  const DataType dtype = reduction_dtype(input, "reduce_scatter_tensor");
  const ReduceOp op = reduction_op(opts.reduceOp, "reduce_scatter_tensor");
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {output},
                 [this, output, input, dtype, op] {
                   StagedTensor in(input, StagedTensor::Use::read);
                   StagedTensor out(output, StagedTensor::Use::write);
                   collectives_.reduce_scatter(in.data(), out.data(), out.numel(), dtype, op);
                   out.write_back();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  const at::Tensor output = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<std::size_t>(size_),
              "antdt: reduce_scatter needs one input list of ", size_, " tensors");
  const std::vector<at::Tensor> list = inputs[0];
  for (const auto& t : list) {
    check_tensor(t, "reduce_scatter");
    check_same_type(t, output, "reduce_scatter");
    TORCH_CHECK(t.numel() == output.numel(), "antdt: reduce_scatter needs inputs of the output's size (",
                output.numel(), " elements), got ", t.numel());
  }
  const DataType dtype = reduction_dtype(output, "reduce_scatter");
  const ReduceOp op = reduction_op(opts.reduceOp, "reduce_scatter");
  return enqueue(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", {output}, [this, output, list, dtype, op] {
    std::vector<at::Tensor> rows;
    for (const auto& t : list) rows.push_back(t.reshape({-1}));
    const at::Tensor flat = at::cat(rows);
    StagedTensor out(output, StagedTensor::Use::write);
    collectives_.reduce_scatter(flat.data_ptr(), out.data(), out.numel(), dtype, op);
    out.write_back();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& output_splits,
                                                                std::vector<int64_t>& input_splits,
                                                                const c10d::AllToAllOptions&) {
  check_tensor(output, "all_to_all_single");
  check_tensor(input, "all_to_all_single");
  check_same_type(output, input, "all_to_all_single");
  // Splits count rows (dim 0); empty splits mean equal blocks.
  auto block_bytes = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    const std::size_t rows = t.dim() == 0 ? 1 : static_cast<std::size_t>(t.size(0));
    const std::size_t row_bytes = rows == 0 ? 0 : t.nbytes() / rows;
    std::vector<std::size_t> bytes;
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, "antdt: all_to_all_single without ", which, " splits needs dim 0 (", rows,
                  ") divisible by the group size ", size_);
      bytes.assign(size_, rows / size_ * row_bytes);
    } else {
      TORCH_CHECK(splits.size() == static_cast<std::size_t>(size_), "antdt: all_to_all_single needs ", size_, " ",
                  which, " splits, got ", splits.size());
      std::size_t sum = 0;
      for (int64_t s : splits) {
        TORCH_CHECK(s >= 0, "antdt: all_to_all_single: negative ", which, " split ", s);
        sum += static_cast<std::size_t>(s);
        bytes.push_back(static_cast<std::size_t>(s) * row_bytes);
      }
      TORCH_CHECK(sum == rows, "antdt: all_to_all_single: the ", which, " splits add up to ", sum,
                  " rows, the tensor has ", rows);
    }
    return bytes;
  };
  const auto send_bytes = block_bytes(input, input_splits, "input");
  const auto recv_bytes = block_bytes(output, output_splits, "output");
  TORCH_CHECK(send_bytes[rank_] == recv_bytes[rank_], "antdt: all_to_all_single: this rank's block to itself is ",
              send_bytes[rank_], " bytes in the input but ", recv_bytes[rank_], " in the output");
  const bool even = input_splits.empty() && output_splits.empty();
  return enqueue(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output},
                 [this, output, input, send_bytes, recv_bytes, even] {
                   StagedTensor in(input, StagedTensor::Use::read);
                   StagedTensor out(output, StagedTensor::Use::write);
                   if (even) {
                     collectives_.alltoall(in.data(), out.data(), send_bytes[0], kBytes);
                   } else {
                     std::size_t send_off = 0, recv_off = 0;
                     std::size_t own_send = 0, own_recv = 0;
                     collectives_.group_start();
                     for (int r = 0; r < size_; ++r) {
                       if (r == rank_) {
                         own_send = send_off;
                         own_recv = recv_off;
                       } else {
                         collectives_.send(bytes_of(in) + send_off, send_bytes[r], kBytes, r);
                         collectives_.recv(bytes_of(out) + recv_off, recv_bytes[r], kBytes, r);
                       }
                       send_off += send_bytes[r];
                       recv_off += recv_bytes[r];
                     }
                     collectives_.group_end();
                     std::memcpy(bytes_of(out) + own_recv, bytes_of(in) + own_send, send_bytes[rank_]);
                   }
                   out.write_back();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions&) {
  TORCH_CHECK(outputs.size() == static_cast<std::size_t>(size_) && inputs.size() == outputs.size(),
              "antdt: all_to_all needs ", size_, " input and ", size_, " output tensors");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check_tensor(inputs[i], "all_to_all");
    check_tensor(outputs[i], "all_to_all");
    check_same_type(inputs[i], outputs[i], "all_to_all");
  }
  TORCH_CHECK(inputs[rank_].numel() == outputs[rank_].numel(), "antdt: all_to_all: this rank's input ", rank_,
              " and output ", rank_, " differ in size");
  return enqueue(c10d::OpType::ALLTOALL, "all_to_all", outputs, [this, outputs, inputs] {
    std::vector<StagedTensor> in, out;
    in.reserve(inputs.size());
    out.reserve(outputs.size());
    for (const auto& t : inputs) in.emplace_back(t, StagedTensor::Use::read);
    for (const auto& t : outputs) out.emplace_back(t, StagedTensor::Use::write);
    collectives_.group_start();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      collectives_.send(in[r].data(), in[r].nbytes(), kBytes, r);
      collectives_.recv(out[r].data(), out[r].nbytes(), kBytes, r);
    }
    collectives_.group_end();
    std::memcpy(out[rank_].data(), in[rank_].data(), in[rank_].nbytes());
    for (auto& o : out) o.write_back();
  });
}

}  // namespace antdt::pytorch
