// The status page's files (server/status_page/index.html and status.js),
// compiled into the coordinator by the status_page_assets genrule so the
// page needs nothing on disk and nothing from the network.
#ifndef TESSERA_SERVER_STATUS_PAGE_ASSETS_H_
#define TESSERA_SERVER_STATUS_PAGE_ASSETS_H_

namespace tessera {

extern const char kStatusPageHtml[];
extern const char kStatusPageScript[];

}  // namespace tessera

#endif  // TESSERA_SERVER_STATUS_PAGE_ASSETS_H_
