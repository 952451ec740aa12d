package launcher

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"k8s.io/klog/v2"
)

// DefaultConsoleLogSize bounds the serial console log: when the file
// reaches it, it is moved to <file>.1 (replacing the previous one).
const DefaultConsoleLogSize = 1 << 20

// console is the launcher's side of QEMU's serial console socket (QEMU
// takes one client): it writes everything to a bounded log and to every
// attached reader, and forwards attached writers' input to the guest.
type console struct {
	c       net.Conn
	logPath string
	maxLog  int64
	tee     io.Writer // Config.ConsoleCopy, or nil

	mu      sync.Mutex
	log     *os.File
	logSize int64
	readers map[chan []byte]struct{}
	done    chan struct{}
}

func startConsole(ctx context.Context, socket, logPath string, maxLog int64, tee io.Writer) (*console, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		c.Close()
		return nil, err
	}
	con := &console{c: c, logPath: logPath, maxLog: maxLog, tee: tee, log: f,
		readers: map[chan []byte]struct{}{}, done: make(chan struct{})}
	go con.pump()
	return con, nil
}

// pump copies the guest's output to the log and the readers until QEMU
// closes the socket. A slow reader loses output; the guest never waits.
func (c *console) pump() {
	defer close(c.done)
	buf := make([]byte, 32<<10)
	for {
		n, err := c.c.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			c.mu.Lock()
			c.writeLog(chunk)
			if c.tee != nil {
				_, _ = c.tee.Write(chunk)
			}
			for r := range c.readers {
				select {
				case r <- chunk:
				default:
				}
			}
			c.mu.Unlock()
		}
		if err != nil {
			c.mu.Lock()
			for r := range c.readers {
				close(r)
			}
			c.readers = map[chan []byte]struct{}{}
			if c.log != nil {
				c.log.Close()
				c.log = nil
			}
			c.mu.Unlock()
			return
		}
	}
}

// writeLog appends to the bounded log; c.mu is held.
func (c *console) writeLog(b []byte) {
	if c.log == nil {
		return
	}
	if c.logSize+int64(len(b)) > c.maxLog {
		c.log.Close()
		if err := os.Rename(c.logPath, c.logPath+".1"); err != nil {
			klog.ErrorS(err, "Rotating the console log")
		}
		f, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			klog.ErrorS(err, "Reopening the console log")
			c.log = nil
			return
		}
		c.log, c.logSize = f, 0
	}
	n, _ := c.log.Write(b)
	c.logSize += int64(n)
}

// Attach returns the guest's output from now on (closed when QEMU ends or
// detach is called) and a writer to its input.
func (c *console) Attach() (out <-chan []byte, in io.Writer, detach func()) {
	ch := make(chan []byte, 256)
	c.mu.Lock()
	select {
	case <-c.done:
		close(ch)
	default:
		c.readers[ch] = struct{}{}
	}
	c.mu.Unlock()
	var once sync.Once
	return ch, c.c, func() {
		once.Do(func() {
			c.mu.Lock()
			if _, ok := c.readers[ch]; ok {
				delete(c.readers, ch)
				close(ch)
			}
			c.mu.Unlock()
		})
	}
}

func (c *console) close() {
	c.c.Close()
	<-c.done
}

// Console attaches to the serial console: the guest's output from now on
// and a writer to its input.
func (l *Launcher) Console() (<-chan []byte, io.Writer, func(), error) {
	if l.con == nil {
		return nil, nil, nil, errors.New("launcher: the VMI has no serial console (autoattachSerialConsole: false)")
	}
	out, in, detach := l.con.Attach()
	return out, in, detach, nil
}

// ConsoleLog is the path of the bounded serial console log.
func (l *Launcher) ConsoleLog() string { return filepath.Join(l.cfg.Dir, "console.log") }
