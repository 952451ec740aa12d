// Package qmp is kemu's client for the QEMU Machine Protocol and for the
// QEMU guest agent, which speaks the same framing.
//
// It implements github.com/digitalocean/go-qemu's qmp.Monitor interface, so
// go-qemu's higher layers can sit on it, and fixes what go-qemu's
// SocketMonitor lacks:
//
//   - one reader goroutine that never blocks: replies are matched to commands
//     by "id", events fan out to any number of subscriptions, each with its
//     own bounded buffer; a subscription that falls behind is told how many
//     events it lost;
//   - events are never dropped for lack of a subscriber: every subscription
//     can replay what arrived since the connection opened (greeting and
//     capability negotiation included);
//   - replies of any size (QEMU 7.2's query-qmp-schema is ~207 KB);
//   - contexts for connecting and for every command;
//   - QEMU dying, closing the socket or sending garbage ends every pending
//     and future call at once with an error saying why;
//   - file descriptors passed with SCM_RIGHTS (getfd, add-fd).
//
// A Monitor is safe for concurrent use.
package qmp
