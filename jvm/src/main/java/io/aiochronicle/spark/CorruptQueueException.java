package io.aiochronicle.spark;

import java.io.IOException;

/**
 * A file of the queue does not hold what Chronicle Queue writes there (the JVM's
 * counterpart of aiochronicle's {@code CorruptQueueError}): the message names the
 * file and the offset of the bad bytes.  Lengths and positions read from a file are
 * checked against the file before anything is allocated or read from them.
 */
public final class CorruptQueueException extends IOException {
    private static final long serialVersionUID = 1L;

    CorruptQueueException(String path, long offset, String what) {
        super(what + " (" + path + " at offset 0x" + Long.toHexString(offset) + ")");
    }
}
