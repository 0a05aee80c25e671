package io.aiochronicle.spark;

import java.io.IOException;
import java.io.ObjectStreamException;

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

    /**
     * Sent between JVMs (an executor's task failure to the driver) as a JDK
     * {@code IOException} whose message starts with this class's name: a driver that
     * has the jar only through {@code ADD JAR} (aiochronicle.spark.register) cannot
     * load this class when it reads the failure, and Spark would then report the
     * task's failure as {@code UnknownReason}, losing the message.
     */
    private Object writeReplace() throws ObjectStreamException {
        IOException sent = new IOException(getClass().getName() + ": " + getMessage(), getCause());
        sent.setStackTrace(getStackTrace());
        return sent;
    }
}
