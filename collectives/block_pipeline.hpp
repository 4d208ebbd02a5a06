// A collective cut into blocks that walk the same ring steps, run so that one
// block's network steps hide the node's work on the others.
//
// The topology-aware collectives (collectives/*_hierarchical.cpp) move each
// block through a node's local ring and a position's inter-node ring. Run
// stage after stage over the whole vector, the network idles while the node
// reduces and copies. Here every block walks its `steps` ring steps (a step:
// send pieces to the right neighbour, receive as many from the left, maybe
// reduce them); up to `window` blocks are in flight, each with one step
// outstanding, served round robin: wait for the oldest block's step, finish
// it (reduce), post that block's next step or admit the next block.
//
// Why that is safe:
//  * Matching. Messages between two ranks match in posting order. Every rank
//    walks the same (block, step) order (it depends only on blocks, steps and
//    window, which every rank derives from the call), and a rank posts its
//    send of a step at the same point of that order as its neighbour posts
//    the matching receive.
//  * No deadlock. A rank waits on step k of block b only after posting it; its
//    neighbour posts the other side when it finishes step k-1 of b, which
//    comes earlier in the common order.
//  * Memory. Within a block a step is posted only after every transfer of the
//    step before completed, so no receive overwrites what a send still reads.
//    Blocks finish in the order they were admitted, so the ones in flight are
//    consecutive and block % window names a receive slot and a work area no
//    other holds.
// Every message goes through the Call (headers, signature, deadlines, abort).
// Uses collectives/call.hpp.
#pragma once

#include "collectives/call.hpp"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <span>
#include <vector>

namespace antdt::coll {

// One message each way: `out` goes to the right neighbour; what comes from the
// left lands in `in`, or, when the step reduces, in the block's receive slot,
// and then in = base (op) received.
struct PipelinePiece {
  std::span<const std::byte> out;
  std::span<std::byte> in;
  std::span<const std::byte> base;
};

struct PipelineStep {
  int right = -1, left = -1;
  std::vector<PipelinePiece> pieces;
  bool reduces = false;
  // avg: after this step, each piece's `in` is final for this rank to send
  // on; it is divided once by the ranks.
  bool owns_result = false;
};

struct BlockPipeline {
  std::size_t blocks = 1, steps = 0;
  std::size_t network_steps = 0;  // of `steps`, those between nodes (sizes the window)
  std::size_t max_pieces = 1;  // pieces of the widest step
  std::size_t slot_bytes = 0;  // received bytes of the widest reducing step
  std::size_t work_bytes = 0;  // scratch a block may keep between its steps (partial sums)
  // Describes step `step` of block `block` into `out`, which arrives empty
  // (no pieces, no flags); `work` is the block's work_bytes of scratch, its own
  // while the block is in flight. Called once per step: the scheduler keeps
  // the description until the step is finished, and reuses its storage.
  std::function<void(std::size_t block, std::size_t step, std::span<std::byte> work, PipelineStep& out)> step;
};

// Blocks in flight: enough that 1.5 network steps are queued on average
// (ceil(1.5 * steps / network_steps), at least 2, at most `blocks`), so the
// link has the next step while one is being reduced. Over 1 Gbit/s links
// between 2 nodes of 2 ranks, fewer left the link idle between steps and
// more only lengthened the queue in front of it (docs/multinode.md, "The
// pipeline").
std::size_t pipeline_window(const BlockPipeline& pipeline);

// Runs every step of every block from the call's current index base (op:
// what reducing steps combine with; avg_ranks > 0 divides the pieces of
// `owns_result` steps). Waits for everything it posted.
void run_block_pipeline(Call& call, const BlockPipeline& pipeline, DataType dtype, ReduceOp op,
                        std::size_t avg_ranks);

// Elements [begin, begin + elems) of `count` cut into blocks of at most
// `block_elems`; a zero count is one empty block, so the message stream does
// not depend on the count.
struct Blocks {
  std::size_t total, block_elems;
  std::size_t count() const { return std::max<std::size_t>(1, (total + block_elems - 1) / block_elems); }
  std::size_t begin(std::size_t b) const { return std::min(total, b * block_elems); }
  std::size_t elems(std::size_t b) const { return std::min(total, begin(b) + block_elems) - begin(b); }
};

}  // namespace antdt::coll
