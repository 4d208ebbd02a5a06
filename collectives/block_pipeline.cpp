// The block pipeline's scheduler (collectives/block_pipeline.hpp).
#include "collectives/block_pipeline.hpp"

#include "core/error.hpp"

#include <deque>
#include <utility>

namespace antdt::coll {

std::size_t pipeline_window(const BlockPipeline& pipeline) {
  // ceil(1.5 * steps / network_steps): on average 1.5 network steps queued.
  const std::size_t network = std::max<std::size_t>(1, pipeline.network_steps);
  const std::size_t window = (3 * pipeline.steps + 2 * network - 1) / (2 * network);
  return std::min(pipeline.blocks, std::max<std::size_t>(2, window));
}

namespace {

class Scheduler {
 public:
  Scheduler(Call& call, const BlockPipeline& pipeline, DataType dtype, ReduceOp op, std::size_t avg_ranks)
      : call_(call),
        memory_(call.memory()),
        pipeline_(pipeline),
        dtype_(dtype),
        op_(op),
        avg_ranks_(avg_ranks),
        window_(pipeline_window(pipeline)),
        per_block_(pipeline.slot_bytes + pipeline.work_bytes),
        scratch_(memory_.scratch(call, std::max<std::size_t>(1, window_ * per_block_))),
        steps_(window_) {}

  void run() {
    std::deque<std::pair<std::size_t, std::size_t>> in_flight;  // (block, step), oldest first
    std::size_t admitted = 0;
    auto admit = [&] {
      post(admitted, 0);
      in_flight.emplace_back(admitted++, 0);
    };
    while (admitted < window_) admit();
    while (!in_flight.empty()) {
      const auto [block, step] = in_flight.front();
      in_flight.pop_front();
      finish(block);
      if (step + 1 < pipeline_.steps) {
        post(block, step + 1);
        in_flight.emplace_back(block, step + 1);
      } else if (admitted < pipeline_.blocks) {
        admit();
      }
    }
  }

 private:
  // Pool indexes of a block's operations: one receive and one send per piece.
  std::size_t first_index(std::size_t block) const { return 2 * pipeline_.max_pieces * (block % window_); }
  // A block's scratch: its receive slot, then its work area.
  std::byte* slot(std::size_t block) const { return scratch_.data() + (block % window_) * per_block_; }
  // The step a block has outstanding, described when it was posted.
  PipelineStep& outstanding(std::size_t block) { return steps_[block % window_]; }

  void post(std::size_t block, std::size_t step) {
    PipelineStep& s = outstanding(block);
    s.pieces.clear();  // keeps its capacity: no allocation per step once the window is warm
    s.right = s.left = -1;
    s.reduces = s.owns_result = false;
    pipeline_.step(block, step, std::span(slot(block) + pipeline_.slot_bytes, pipeline_.work_bytes), s);
    ANTDT_ASSERT(s.pieces.size() <= pipeline_.max_pieces);
    std::size_t index = first_index(block), offset = 0;
    for (const PipelinePiece& piece : s.pieces) {
      if (s.reduces) {
        ANTDT_ASSERT(offset + piece.in.size() <= pipeline_.slot_bytes);
        call_.recv(index++, s.left, std::span(slot(block) + offset, piece.in.size()));
        offset += piece.in.size();
      } else {
        call_.recv(index++, s.left, piece.in);
      }
      call_.send(index++, s.right, piece.out);
    }
  }

  void finish(std::size_t block) {
    const PipelineStep& s = outstanding(block);
    const std::size_t first = first_index(block);
    for (std::size_t i = 0; i < 2 * s.pieces.size(); ++i) call_.wait(first + i);
    if (!s.reduces) return;
    std::size_t offset = 0;
    for (const PipelinePiece& piece : s.pieces) {
      memory_.reduce_into(dtype_, op_, piece.in, piece.base, std::span(slot(block) + offset, piece.in.size()));
      offset += piece.in.size();
      if (s.owns_result && avg_ranks_ > 0) memory_.finish_avg(dtype_, piece.in, avg_ranks_);
    }
    memory_.settle();  // the block's next step sends what was just reduced
  }

  Call& call_;
  CallMemory& memory_;
  const BlockPipeline& pipeline_;
  DataType dtype_;
  ReduceOp op_;
  std::size_t avg_ranks_;
  std::size_t window_;
  std::size_t per_block_;
  std::span<std::byte> scratch_;
  std::vector<PipelineStep> steps_;  // per window slot
};

}  // namespace

void run_block_pipeline(Call& call, const BlockPipeline& pipeline, DataType dtype, ReduceOp op,
                        std::size_t avg_ranks) {
  if (pipeline.steps > 0) Scheduler(call, pipeline, dtype, op, avg_ranks).run();
  call.wait_all();
}

}  // namespace antdt::coll
