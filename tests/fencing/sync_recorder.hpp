// The test binary defines fsync and fdatasync itself, so the fencing library's calls come here
// first and go on to the C library's; by default they only pass through. Two uses:
// - records completed syncs, for the power-cut test: while recording is on, every fsync and
//   fdatasync of this process that succeeds writes "S <path> <bytes>" to a file descriptor, where
//   <bytes> is the file's size when the call began (what the call made durable);
// - fails them, for the failed-disk tests: while failing is on, each returns -1 with EIO and
//   makes nothing durable, as a disk that failed a write-back does.
#pragma once

namespace zkagent::fencing::testing {

// Starts reporting syncs to `fd` (a pipe; lines under PIPE_BUF never interleave). For a forked
// child only: there is no way back.
void recordSyncsTo(int fd);

// Makes every fsync and fdatasync fail with EIO (true) or pass through again (false).
void failSyncs(bool failing);

}  // namespace zkagent::fencing::testing
